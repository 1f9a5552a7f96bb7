"""Build, inspect and remove an emulated rack."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.errors import ConfigError, TestbedError
from fabtune.paths import private_dir
from fabtune.testbed import files, layout, system
from fabtune.testbed.layout import Names
from fabtune.testbed.spec import HostSpec, TestbedSpec, build_spec, is_testbed_name, spec_to_doc

Progress = Callable[[str], None]
REQUIRED = ("ip", "unshare", "mount", "pivot_root", "ssh-keygen", "ssh", "/usr/sbin/sshd")
SSHD_WAIT_S = 30.0
SWITCH_MTU = 9216
HOST_UMASK = 0o022  # an emulated host's files look like a real host's; the testbed directory is 0700


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Built:
    """What one testbed built, as its state file records it: what ``down`` may remove."""

    netns: tuple[str, ...]
    links: tuple[str, ...]
    pids: tuple[tuple[int, int | None], ...]  # (pid, start time in clock ticks) of each host's init


@dataclass(frozen=True)
class HostStatus:
    """What ``testbed status`` reports per host."""

    name: str
    netns: bool
    running: bool
    ssh: bool
    mgmt_ip: str


def preflight() -> None:
    """Refuse to start without root or the commands the testbed needs."""
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network, mount and PID namespaces)")
    missing = [cmd for cmd in REQUIRED if shutil.which(cmd) is None]
    if missing:
        raise TestbedError(f"missing commands: {', '.join(missing)} (run scripts/install.sh)")


def load_state(name: str) -> dict[str, Any] | None:
    """The state of testbed ``name`` as ``up`` left it, or None."""
    path = layout.testbed_dir(name) / "state.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def existing() -> list[str]:
    """The names of the testbeds built under this FABTUNE_HOME, sorted."""
    root = layout.fabtune_home() / "testbeds"
    names = sorted(p.parent.name for p in root.glob("*/state.json")) if root.is_dir() else []
    return [n for n in names if is_testbed_name(n)]


def load_spec_of(name: str) -> TestbedSpec:
    """The spec testbed ``name`` was built from."""
    state = load_state(name)
    if state is None:
        raise TestbedError(f"no testbed named {name!r} (run 'fabtune testbed up')")
    return build_spec(state["spec"], f"{layout.testbed_dir(name)}/state.json")


def chosen_hosts(spec: TestbedSpec, hosts: Sequence[str], verb: str, label: str) -> list[str]:
    """The names of ``hosts`` (every host of ``spec`` when empty), in the spec's order.

    Raises:
        ConfigError: a host the testbed does not have (``verb``: the error's subject, ``label``: the
            argument's name).
    """
    known = [h.name for h in spec.hosts]
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise ConfigError(verb, [f"{label}: {unknown[0]!r} is not a host of testbed {spec.name!r} "
                                 f"(its hosts: {', '.join(known)})"])
    return [h for h in known if not hosts or h in hosts]


def _check_subnet_free(spec: TestbedSpec) -> None:
    ours = Names(spec.name)
    wanted = ipaddress.IPv4Network(f"{spec.subnet_base}.0.0/16")
    for route in system.ip_json("-4", "route", "show"):
        dst = route.get("dst", "")
        if dst in ("default", "") or ours.owns(str(route.get("dev", ""))):
            continue
        if ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False).overlaps(wanted):
            raise ConfigError(
                "testbed spec",
                [
                    f"subnet_base: {spec.subnet_base!r} overlaps the route {dst} on {route.get('dev')}; "
                    "choose another (e.g. 10.124)"
                ],
            )


def _check_login_user(spec: TestbedSpec) -> None:
    """A login user must be new to the hosts, whose /etc/passwd is an overlay of this machine's."""
    if not spec.nonroot_login:
        return
    try:
        pwd.getpwnam(spec.login_user)
    except KeyError:
        if shutil.which("useradd") is None:
            raise TestbedError("missing command: useradd (package passwd), needed for login_user") from None
        return
    raise ConfigError(
        "testbed spec",
        [f"login_user: {spec.login_user!r} is already an account of this machine, whose /etc/passwd "
         "the hosts share (their root is an overlay of /); choose a new name, e.g. 'ops'"],
    )


def _make_bridges(spec: TestbedSpec, names: Names) -> None:
    bridges = [names.mgmt_bridge] + [names.rail_bridge(r) for r in range(spec.nics_per_host)]
    for bridge in bridges:
        system.ip("link", "add", bridge, "type", "bridge")
        system.ip("link", "set", bridge, "mtu", str(SWITCH_MTU), "up")
    prefix = spec.mgmt_network.prefixlen
    system.ip("addr", "add", f"{layout.controller_ip(spec)}/{prefix}", "dev", names.mgmt_bridge)


def _veth(outer: str, inner: str, netns: str, bridge: str) -> None:
    system.ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", netns)
    # The switch side takes jumbo frames, as a data-centre switch port does: the host's MTU governs.
    system.ip("link", "set", outer, "mtu", str(SWITCH_MTU), "master", bridge, "up")


def _make_host_net(spec: TestbedSpec, names: Names, host: HostSpec) -> None:
    ns = names.netns(host.name)
    system.ip("netns", "add", ns)
    system.ip("link", "set", "lo", "up", netns=ns)
    _veth(names.mgmt_veth(host), "eth0", ns, names.mgmt_bridge)
    system.ip(
        "addr", "add", f"{layout.mgmt_ip(spec, host)}/{spec.mgmt_network.prefixlen}", "dev", "eth0", netns=ns
    )
    system.ip("link", "set", "eth0", "up", netns=ns)
    for rail in range(spec.nics_per_host):
        dev = layout.nic_netdev(spec, rail)
        _veth(names.rail_veth(host, rail), dev, ns, names.rail_bridge(rail))
        system.ip(
            "link", "set", dev, "address", layout.mac(host, rail), "mtu", str(host.initial["mtu"]), netns=ns
        )
        system.ip(
            "addr",
            "add",
            f"{layout.rail_ip(spec, host, rail)}/{spec.rail_network(rail).prefixlen}",
            "dev",
            dev,
            netns=ns,
        )
        system.ip("link", "set", dev, "up", netns=ns)
    system.ip("route", "add", "default", "via", layout.controller_ip(spec), netns=ns, check=False)


def _start_host(spec: TestbedSpec, names: Names, host: HostSpec, tb_dir: Path) -> int:
    host_dir = tb_dir / "hosts" / host.name
    log = (host_dir / "init.log").open("w")
    argv = [
        "ip",
        "netns",
        "exec",
        names.netns(host.name),
        "unshare",
        "--mount",
        "--uts",
        "--pid",
        "--fork",
        "--propagation",
        "private",
        "--kill-child",
        "--",
        sys.executable,
        "-m",
        "fabtune.testbed.hostinit",
        str(host_dir),
        host.name,
    ]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return proc.pid


def _ssh_open(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _wait_for_sshd(spec: TestbedSpec, tb_dir: Path) -> None:
    deadline = time.monotonic() + SSHD_WAIT_S
    pending = {h.name: layout.mgmt_ip(spec, h) for h in spec.hosts}
    while pending and time.monotonic() < deadline:
        pending = {n: a for n, a in pending.items() if not _ssh_open(a)}
        if pending:
            time.sleep(0.1)
    if pending:
        logs = "; ".join(f"{n}: {_tail(tb_dir / 'hosts' / n / 'init.log')}" for n in sorted(pending))
        raise TestbedError(
            f"sshd did not start on {', '.join(sorted(pending))} within {SSHD_WAIT_S:.0f} s ({logs})"
        )


def _tail(path: Path) -> str:
    try:
        lines = path.read_text().strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "empty log"


def _objects(spec: TestbedSpec) -> tuple[list[str], list[str]]:
    """The network namespaces and links that ``spec`` builds (exact names)."""
    names = Names(spec.name)
    links = [names.mgmt_bridge] + [names.rail_bridge(r) for r in range(spec.nics_per_host)]
    for host in spec.hosts:
        links += [names.mgmt_veth(host)] + [names.rail_veth(host, r) for r in range(spec.nics_per_host)]
    return [names.netns(h.name) for h in spec.hosts], links


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot), or None when it does not exist."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def _write_state(spec: TestbedSpec, tb_dir: Path, pids: dict[str, int]) -> None:
    """Record what the testbed builds before it is built, so ``down`` removes exactly that."""
    netns, links = _objects(spec)
    state = {
        "version": 2,
        "spec": spec_to_doc(spec),
        "netns": netns,
        "links": links,
        "pids": pids,
        "started": {host: _start_time(pid) for host, pid in pids.items()},
        "created": time.time(),
    }
    tmp = tb_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(tb_dir / "state.json")


def healthy(spec: TestbedSpec) -> bool:
    """Whether every host of ``spec`` is up and answering SSH."""
    return all(s.netns and s.running and s.ssh for s in status(spec.name))


def up(spec: TestbedSpec, progress: Progress = _quiet) -> Path:
    """Build the rack ``spec`` describes (or keep it, when it is already up and identical).

    A half-built or stale testbed of the same name is removed first.

    Returns:
        The testbed directory.

    Raises:
        TestbedError: when something cannot be built; whatever was built is removed again.
    """
    preflight()
    _check_login_user(spec)
    tb_dir = layout.testbed_dir(spec.name)
    state = load_state(spec.name)
    if state is not None and state.get("spec") == spec_to_doc(spec) and healthy(spec):
        progress("already up")
        return tb_dir
    if state is not None or leftovers(spec.name):
        progress("removing a stale testbed of the same name")
        _clear(spec)
    _check_subnet_free(spec)
    try:
        _build(spec, tb_dir, progress)
    except BaseException:
        _clear(spec)
        raise
    return tb_dir


def _clear(spec: TestbedSpec) -> None:
    """Remove what the state of ``spec``'s testbed records and whatever ``spec`` is about to build
    (a half-built testbed may have built some of it before its state was written)."""
    recorded = _built(spec.name, load_state(spec.name) or {})
    netns, links = _objects(spec)
    _remove(spec.name, Built(tuple(dict.fromkeys([*recorded.netns, *netns])),
                             tuple(dict.fromkeys([*recorded.links, *links])), recorded.pids))


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _build(spec: TestbedSpec, tb_dir: Path, progress: Progress) -> None:
    names = Names(spec.name)
    private_dir(tb_dir)
    pids: dict[str, int] = {}
    _write_state(spec, tb_dir, pids)
    with _umask(HOST_UMASK):
        _build_hosts(spec, names, tb_dir, pids, progress)
    _write_state(spec, tb_dir, pids)
    progress("waiting for sshd")
    _wait_for_sshd(spec, tb_dir)
    files.write_inventory(spec, tb_dir)


def _build_hosts(
    spec: TestbedSpec, names: Names, tb_dir: Path, pids: dict[str, int], progress: Progress
) -> None:
    keys = files.make_keys(spec, tb_dir)
    files.write_fabric(spec, tb_dir)
    _make_bridges(spec, names)
    for host in spec.hosts:
        progress(f"host {host.name}")
        _make_host_net(spec, names, host)
        files.populate_host(spec, host, tb_dir, keys)
        pids[host.name] = _start_host(spec, names, host, tb_dir)
        _write_state(spec, tb_dir, pids)


def status(name: str) -> list[HostStatus]:
    """Per-host status of testbed ``name`` (empty when it does not exist)."""
    state = load_state(name)
    if state is None:
        return []
    spec = build_spec(state["spec"])
    names = Names(name)
    present = set(system.netns_list())
    return [
        HostStatus(
            name=h.name,
            netns=names.netns(h.name) in present,
            running=_alive(state.get("pids", {}).get(h.name)),
            ssh=_ssh_open(layout.mgmt_ip(spec, h)),
            mgmt_ip=layout.mgmt_ip(spec, h),
        )
        for h in spec.hosts
    ]


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def _kill_netns(netns: str) -> list[int]:
    proc = system.ip("netns", "pids", netns, check=False)
    pids = [int(p) for p in proc.stdout.split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def down(name: str) -> None:
    """Remove testbed ``name``: exactly what its state file says it built (the host processes it
    started and every process in its namespaces, its namespaces, links and directory).

    Raises:
        ConfigError: when ``name`` is not a testbed name.
        TestbedError: when there is no testbed of that name (nothing is removed), or when something
            of it is still there afterwards.
    """
    tb_dir = layout.testbed_dir(name)
    state = load_state(name)
    if state is None and not tb_dir.exists():
        found = leftovers(name)
        seen = f" (found without a state file, not removed: {'; '.join(found)})" if found else ""
        raise TestbedError(f"no testbed named {name!r} in {tb_dir.parent}; nothing removed{seen}")
    _remove(name, _built(name, state or {}))


def _built(name: str, state: dict[str, Any]) -> Built:
    """What ``state`` records as built, limited to objects named as testbed ``name`` names them."""
    names = Names(name)
    netns, links = list(state.get("netns", [])), list(state.get("links", []))
    if "netns" not in state and isinstance(state.get("spec"), dict):  # a version 1 state: the spec
        with contextlib.suppress(ConfigError):
            netns, links = _objects(build_spec(state["spec"]))
    started = state.get("started", {})
    pids = tuple(
        (pid, started.get(host)) for host, pid in dict(state.get("pids", {})).items() if isinstance(pid, int)
    )
    return Built(
        netns=tuple(n for n in netns if isinstance(n, str) and n.startswith(names.netns_prefix)),
        links=tuple(link for link in links if isinstance(link, str) and names.owns(link)),
        pids=pids,
    )


def _remove(name: str, built: Built) -> None:
    tb_dir = layout.testbed_dir(name)
    killed = [pid for pid, started in built.pids if started is not None and _kill_if(pid, started)]
    listed = set(system.netns_list())
    present = [n for n in built.netns if n in listed]
    for netns in present:
        killed += _kill_netns(netns)
    _wait_gone(killed)
    for netns in present:
        system.ip("netns", "del", netns)
    existing = set(system.link_names())
    for link in [link for link in built.links if link in existing]:
        system.ip("link", "del", link, check=False)
    mounts = _mounts_under(tb_dir)
    if mounts:
        raise TestbedError(f"testbed {name!r}: {', '.join(mounts)} still mounted; its directory was kept")
    shutil.rmtree(tb_dir, ignore_errors=True)
    left = leftovers(name)
    if left:
        raise TestbedError(f"testbed {name!r} not fully removed: {'; '.join(left)}")


def _kill_if(pid: int, started: int) -> bool:
    """Kill ``pid`` when it is still the process that was recorded (not a reuse of its number)."""
    if _start_time(pid) != started or not _alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def leftovers(name: str) -> list[str]:
    """Everything of testbed ``name`` that exists: namespaces, links, mounts, its directory."""
    names = Names(name)
    tb_dir = layout.testbed_dir(name)
    found = [f"netns {n}" for n in system.netns_list() if n.startswith(names.netns_prefix)]
    found += [f"link {n}" for n in system.link_names() if names.owns(n)]
    found += [f"mount {m}" for m in _mounts_under(tb_dir)]
    if tb_dir.exists():
        found.append(f"directory {tb_dir}")
    return found


def _mounts_under(tb_dir: Path) -> list[str]:
    top = str(tb_dir)
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [m for m in points if m == top or m.startswith(f"{top}/")]
