"""Files of a testbed: SSH keys, known_hosts, each host's root additions, the Ansible inventory."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

import fabtune
from fabtune.errors import TestbedError
from fabtune.sim import toolserver
from fabtune.testbed import layout, system
from fabtune.testbed.spec import HostSpec, TestbedSpec

# Where the real packages put each tool (mlnx-tools, infiniband-diags, rdma-core, iproute2,
# ethtool, nvidia driver): the emulated tools replace them at the same paths inside each host.
TOOL_PATHS = {
    "mlnx_qos": "/usr/bin/mlnx_qos",
    "dcb": "/usr/sbin/dcb",
    "ibdev2netdev": "/usr/bin/ibdev2netdev",
    "show_gids": "/usr/sbin/show_gids",
    "ibstat": "/usr/sbin/ibstat",
    "ibstatus": "/usr/sbin/ibstatus",
    "ibv_devinfo": "/usr/bin/ibv_devinfo",
    "nvidia-smi": "/usr/bin/nvidia-smi",
    "ethtool": "/usr/sbin/ethtool",
    "cma_roce_tos": "/usr/sbin/cma_roce_tos",
    "cma_roce_mode": "/usr/sbin/cma_roce_mode",
    "sminfo": "/usr/sbin/sminfo",
    "ib_write_bw": "/usr/bin/ib_write_bw",
    "ib_read_bw": "/usr/bin/ib_read_bw",
    "ib_send_bw": "/usr/bin/ib_send_bw",
    "rdma": "/usr/bin/rdma",  # iproute2 (dpkg -L iproute2 on Debian 12)
    "all_reduce_perf": "/usr/local/bin/all_reduce_perf",
    "all_gather_perf": "/usr/local/bin/all_gather_perf",
    "reduce_scatter_perf": "/usr/local/bin/reduce_scatter_perf",
    "alltoall_perf": "/usr/local/bin/alltoall_perf",
    "systemd-run": "/usr/bin/systemd-run",
    "systemctl": "/usr/bin/systemctl",
    "lldptool": "/usr/sbin/lldptool",  # lldpad (dpkg -L lldpad on Debian 12)
    "lldpad": "/usr/sbin/lldpad",
}

SSHD_CONFIG = """\
# sshd of an emulated fabtune testbed host (written by fabtune testbed up)
Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
PidFile none
MaxStartups 200:30:400
MaxSessions 64
AcceptEnv LANG LC_* NCCL_* OMPI_*
LogLevel ERROR
Subsystem sftp /usr/lib/openssh/sftp-server
"""


@dataclass(frozen=True)
class Keys:
    """The testbed's client key and each host's public host key."""

    private: Path
    public: str
    host_public: dict[str, str]


def _keygen(path: Path, comment: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_suffix(".pub").read_text().strip()


def make_keys(spec: TestbedSpec, tb_dir: Path) -> Keys:
    """Generate the client key and one host key per host; write known_hosts."""
    ssh_dir = tb_dir / "ssh"
    public = _keygen(ssh_dir / "id_ed25519", f"fabtune-testbed-{spec.name}")
    hosts: dict[str, str] = {}
    for host in spec.hosts:
        key = tb_dir / "hosts" / host.name / "upper/etc/ssh/ssh_host_ed25519_key"
        hosts[host.name] = _keygen(key, f"root@{host.name}")
    keys = Keys(ssh_dir / "id_ed25519", public, hosts)
    (ssh_dir / "known_hosts").write_text(known_hosts(spec, keys))
    return keys


def known_hosts(spec: TestbedSpec, keys: Keys) -> str:
    """known_hosts lines: each host by name and management address."""
    lines = []
    for host in spec.hosts:
        key = " ".join(keys.host_public[host.name].split()[:2])
        lines.append(f"{host.name},{layout.mgmt_ip(spec, host)} {key}")
    return "\n".join(lines) + "\n"


def _etc_hosts(spec: TestbedSpec) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{layout.mgmt_ip(spec, h)}\t{h.name}" for h in spec.hosts]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


TOOL_PACKAGES = {"mlnx_qos": "mlnx-tools", "dcb": "iproute2", "lldptool": "lldpad", "lldpad": "lldpad"}
"""The package a tool comes with, for the tools a spec can leave off a host (``tools: none``)."""


def _install_tools(upper: Path, tools: dict[str, str]) -> None:
    for name, dest in TOOL_PATHS.items():
        if tools.get(TOOL_PACKAGES.get(name, ""), "") == "none":
            continue
        _write(upper / dest.lstrip("/"), tool_launcher(name), 0o755)


def tool_launcher(name: str) -> str:
    """The file installed as tool ``name``. The time is taken first: what the tool's own imports
    take is the emulator's, not the real tool's.

    A tool the host's tool server serves (``fabtune.sim.toolserver.SERVED``) starts without
    ``site`` (``-S``: the venv's ``.pth`` files and the editable install's finder are a third of a
    bare start) and hands the call to the server (``fabtune.sim.toolclient``), which runs it in a
    child already imported; with no server there, the launcher runs the tool itself.
    """
    stamp = f"#!{sys.executable}{{flags}}\nimport time\nLAUNCHED = time.time()\n"
    if name not in toolserver.SERVED:
        return (stamp.format(flags="") +
                f"from fabtune.sim.tools import run\nrun({name!r}, LAUNCHED)\n")
    return (stamp.format(flags=" -S") + f"import sys\nsys.path[1:1] = {tool_import_paths()!r}\n"
            f"from fabtune.sim.toolclient import run\nrun({name!r}, LAUNCHED)\n")


def tool_import_paths() -> list[str]:
    """Where this interpreter finds fabtune (a checkout's root, or site-packages for a wheel),
    then its site-packages: a launcher's ``sys.path`` without ``site``."""
    paths = [str(Path(fabtune.__file__).resolve().parents[1])]
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in paths:
            paths.append(path)
    return paths


def _root_ssh(upper: Path, spec: TestbedSpec, keys: Keys) -> None:
    ssh = upper / "root/.ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    ssh.chmod(0o700)
    _write(ssh / "authorized_keys", keys.public + "\n", 0o600)
    _write(ssh / "id_ed25519", keys.private.read_text(), 0o600)
    _write(ssh / "id_ed25519.pub", keys.public + "\n")
    _write(ssh / "known_hosts", known_hosts(spec, keys))


SUDOERS_DIR = "etc/sudoers.d"
LOGIN_FILE = "login.json"
"""Per host: the login user hostinit creates inside the host (read before it pivots into the root)."""


def sudoers_rule(user: str) -> str:
    """The sudoers drop-in of the testbed's login user: passwordless sudo to any command.

    Ansible's ``become`` runs ``sudo ... /bin/sh -c '... python3 ...'``, so the rule cannot be
    narrowed to the commands the roles run (docs/operations.md, "Privileges").
    """
    return (f"# fabtune testbed login user (written by fabtune testbed up)\n"
            f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")


def check_sudoers(text: str) -> None:
    """Validate a sudoers drop-in with ``visudo -c`` when visudo is installed.

    Raises:
        TestbedError: when visudo refuses the text.
    """
    visudo = shutil.which("visudo") or ("/usr/sbin/visudo" if Path("/usr/sbin/visudo").exists() else None)
    if visudo is None:
        return
    with tempfile.TemporaryDirectory(prefix="fabtune-sudoers-") as tmp:
        path = Path(tmp) / "login"
        path.write_text(text)
        path.chmod(0o440)
        proc = system.run([visudo, "-c", "-q", "-f", str(path)], check=False)
    if proc.returncode != 0:
        raise TestbedError(f"visudo refuses the login user's sudoers rule: {proc.stdout.strip()} "
                           f"{proc.stderr.strip()}")


def _login_user(spec: TestbedSpec, host_dir: Path, upper: Path, keys: Keys) -> None:
    """Give the host its login user: the sudoers drop-in now, the account and its SSH files at boot.

    The account is made inside the host by hostinit (``useradd`` in the host's own root, so only
    the host's overlay changes, never this machine's /etc/passwd), from ``login.json``.
    """
    rule = sudoers_rule(spec.login_user)
    check_sudoers(rule)
    drop_in = upper / SUDOERS_DIR / f"fabtune-{spec.login_user}"
    _write(drop_in, rule, 0o440)
    login = {
        "user": spec.login_user,
        "ssh": {
            "authorized_keys": keys.public + "\n",
            "id_ed25519": keys.private.read_text(),
            "id_ed25519.pub": keys.public + "\n",
            "known_hosts": known_hosts(spec, keys),
        },
    }
    path = host_dir / LOGIN_FILE
    path.write_text(json.dumps(login, indent=2) + "\n")
    path.chmod(0o600)


OPENSM = "/usr/sbin/opensm"
OPENSM_LOG = "/var/log/opensm.log"


def set_conf_key(text: str, key: str, value: str) -> str:
    """Set ``key value`` in an opensm.conf text: replace the key's line, or append one."""
    pattern = re.compile(rf"^{re.escape(key)}\s.*$", re.MULTILINE)
    line = f"{key} {value}"
    if pattern.search(text):
        return pattern.sub(lambda _: line, text, count=1)
    return text + ("" if text.endswith("\n") or not text else "\n") + line + "\n"


def opensm_conf(spec: TestbedSpec) -> str:
    """The SM host's /etc/opensm/opensm.conf: the real ``opensm --create-config`` plus the spec's
    routing engine (an ``ar_*`` engine is adaptive routing; there is no separate key)."""
    if spec.sm is None:
        raise TestbedError("opensm.conf requested for a testbed without a subnet manager")
    with tempfile.TemporaryDirectory(prefix="fabtune-opensm-") as tmp:
        path = Path(tmp) / "opensm.conf"
        proc = system.run([OPENSM, "--create-config", str(path)], check=False)
        if proc.returncode != 0 or not path.is_file():
            raise TestbedError(f"{OPENSM} --create-config failed (rc {proc.returncode}): install opensm")
        text = path.read_text()
    text = set_conf_key(text, "routing_engine", spec.sm.routing_engine)
    if spec.sm.qos:
        text = set_conf_key(text, "qos", "TRUE")
    if spec.sm.qos_sl2vl:
        text = set_conf_key(text, "qos_sl2vl", ",".join(map(str, spec.sm.qos_sl2vl)))
    return text


NICD_LOG = "/var/log/fabtune-nicd.log"
TOOLSERVER_LOG = "/var/log/fabtune-toolserver.log"


def _subnet_manager(spec: TestbedSpec, upper: Path) -> dict[str, object]:
    """Make the host the subnet manager: opensm.conf, and the emulated opensm hostinit starts."""
    _write(upper / "etc/opensm/opensm.conf", opensm_conf(spec))
    flavor = spec.sm.flavor if spec.sm is not None else "upstream"
    return {"argv": [sys.executable, "-m", "fabtune.sim.opensm", "--flavor", flavor],
            "log": OPENSM_LOG}


def _daemons(spec: TestbedSpec, host: HostSpec, host_dir: Path, upper: Path) -> None:
    """``daemons.json``: what hostinit starts in the host. Every host runs the emulated NICs'
    counter engine (fabtune.sim.nicd) and the emulated tools' server (fabtune.sim.toolserver); the
    subnet manager host also runs opensm."""
    daemons: list[dict[str, object]] = [
        {"argv": [sys.executable, "-m", "fabtune.sim.nicd"], "log": NICD_LOG},
        {"argv": [sys.executable, "-m", "fabtune.sim.toolserver"], "log": TOOLSERVER_LOG},
    ]
    if spec.sm is not None and spec.sm.host == host.name:
        daemons.append(_subnet_manager(spec, upper))
    (host_dir / "daemons.json").write_text(json.dumps(daemons, indent=2) + "\n")


BOOT_WANTS = "etc/systemd/system/multi-user.target.wants"


def _own_boot_units(upper: Path) -> None:
    """Hide the controller's enabled units from the host: its ``multi-user.target.wants`` starts
    empty (an opaque directory of the overlay's upper layer: the xattr ``trusted.overlay.opaque=y``,
    kernel Documentation/filesystems/overlayfs.rst, "whiteouts and opaque directories"), so the
    emulated boot runs only the units installed on the host itself (fabtune-boot.service)."""
    wants = upper / BOOT_WANTS
    wants.mkdir(parents=True, exist_ok=True)
    os.setxattr(wants, "trusted.overlay.opaque", b"y")


# root's shell start-up files as a fresh Debian host has them: base-files' postinst installs
# /usr/share/base-files/dot.profile and dot.bashrc as /root/.profile and /root/.bashrc. Without
# them the host would run this machine's own (a developer's pyenv or cargo set-up: about 0.13 CPU-s
# and 50 processes for every SSH command Ansible or mpirun runs on the host as root, and a line
# printed there would break Ansible's SSH transfers).
BASE_FILES = Path("/usr/share/base-files")
ROOT_SHELL_FILES = {"root/.profile": "dot.profile", "root/.bashrc": "dot.bashrc"}
ROOT_SHELL_FALLBACK = "# {name}: a testbed host's root, as a fresh Debian install (no base-files here)\n"


def _root_shell_files(upper: Path, base_files: Path = BASE_FILES) -> None:
    """Give root the start-up files of a fresh Debian host, not this machine's (the overlay's
    lower layer): base-files' own where this machine has them, else empty ones."""
    for dest, name in ROOT_SHELL_FILES.items():
        source = base_files / name
        text = source.read_text() if source.is_file() else ROOT_SHELL_FALLBACK.format(name=name)
        _write(upper / dest, text)


# openlldp's lldpad.service, enabled (it starts at boot), without its Requires=lldpad.socket: the
# emulated systemd has no socket activation, and the daemon binds its socket itself.
LLDPAD_UNIT = "usr/lib/systemd/system/lldpad.service"
LLDPAD_SERVICE = """\
[Unit]
Description=Link Layer Discovery Protocol Agent Daemon.
After=syslog.target network.target

[Service]
Type=simple
Restart=always
ExecStart=/usr/sbin/lldpad -t
ExecReload=/bin/kill -HUP $MAINPID

[Install]
WantedBy=multi-user.target
"""


def _lldpad_service(upper: Path) -> None:
    """Install and enable lldpad.service (the emulated boot starts it before sshd)."""
    _write(upper / LLDPAD_UNIT, LLDPAD_SERVICE)
    link = upper / BOOT_WANTS / "lldpad.service"
    link.unlink(missing_ok=True)
    link.symlink_to("/" + LLDPAD_UNIT)


def populate_host(spec: TestbedSpec, host: HostSpec, tb_dir: Path, keys: Keys) -> None:
    """Write what makes the host a GPU node: /etc files, SSH, emulated tools and hardware."""
    from fabtune.sim.node import provision  # the emulated hardware (sysfs, configfs, DCB state)

    host_dir = tb_dir / "hosts" / host.name
    upper = host_dir / "upper"
    for sub in ("work", "merged", "sys/class", "configfs", "emu"):
        (host_dir / sub).mkdir(parents=True, exist_ok=True)
    _write(upper / "etc/hostname", host.name + "\n")
    _write(upper / "etc/hosts", _etc_hosts(spec))
    _write(upper / "etc/ssh/sshd_config", SSHD_CONFIG)
    _root_ssh(upper, spec, keys)
    _root_shell_files(upper)
    _own_boot_units(upper)
    if spec.nonroot_login:
        _login_user(spec, host_dir, upper, keys)
    _install_tools(upper, host.tools)
    if host.tools.get("lldpad", "none") != "none":
        _lldpad_service(upper)
    if host.nccl_conf:
        _write(upper / "etc/nccl.conf", "".join(f"{k}={v}\n" for k, v in host.nccl_conf))
    node = layout.node_description(spec, host)
    if spec.sm is not None:  # every port's SM lid is the master SM's port LID (as sminfo says)
        sm_host = next(h for h in spec.hosts if h.name == spec.sm.host)
        sm_lid = layout.node_description(spec, sm_host)["nics"][0]["lid"]
        for nic in node["nics"]:
            nic["sm_lid"] = sm_lid
    provision(host_dir, node, host.initial)
    (host_dir / "node.json").write_text(json.dumps(node, indent=2))
    _daemons(spec, host, host_dir, upper)


def write_fabric(spec: TestbedSpec, tb_dir: Path) -> None:
    """The shared fabric directory (the switches): bound at /var/lib/fabtune-fabric in every host."""
    fabric = tb_dir / "fabric"
    # The switches are shared by every user of every host: the benchmarks run as whoever launches
    # them (root or the login user), so the flow and job directories are sticky and world-writable
    # like /tmp, and the run counter (updated in place under its lock) is writable by all.
    for sub in ("flows", "jobs", "cm"):  # cm: rdma_cm listeners of perftest -R servers
        (fabric / sub).mkdir(parents=True, exist_ok=True)
        (fabric / sub).chmod(0o1777)
    for name in ("run-counter", ".run-counter.lock"):
        (fabric / name).touch()
        (fabric / name).chmod(0o666)
    doc = {
        "testbed": spec.name, "fabric": spec.fabric, "seed": spec.seed, "hosts": len(spec.hosts),
        "switch": {
            "pfc_priorities": list(spec.switch.pfc_priorities),
            "ecn_priorities": list(spec.switch.ecn_priorities),
            "trust": spec.switch.trust, "nodes_per_leaf": spec.switch.nodes_per_leaf,
            "oversubscription": spec.switch.oversubscription,
            "dscp2prio": {str(d): p for d, p in spec.switch.dscp2prio},
            "spines": spec.switch.spines, "adaptive_routing": spec.switch.adaptive_routing,
        },
        "sm": None if spec.sm is None else {
            "host": spec.sm.host, "routing_engine": spec.sm.routing_engine,
            "adaptive_routing": spec.sm.adaptive_routing, "flavor": spec.sm.flavor,
            "qos": spec.sm.qos,
            "sl2vl": list(spec.sm.qos_sl2vl) if spec.sm.qos else [],
        },
        "host_addresses": {h.name: layout.mgmt_ip(spec, h) for h in spec.hosts},
        **({"job_nodes": spec.job_nodes} if spec.job_nodes else {}),
    }
    (fabric / "fabric.json").write_text(json.dumps(doc, indent=2) + "\n")


def inventory(spec: TestbedSpec, tb_dir: Path) -> dict[str, object]:
    """The Ansible inventory of the testbed (groups: rack, fabric type, subnet managers)."""
    ssh_args = (
        f"-o UserKnownHostsFile={tb_dir / 'ssh/known_hosts'} -o StrictHostKeyChecking=yes"
    )
    hosts = {h.name: {"ansible_host": layout.mgmt_ip(spec, h)} for h in spec.hosts}
    children: dict[str, object] = {
        f"rack_{spec.name}": {"hosts": hosts},
        spec.fabric: {"children": {f"rack_{spec.name}": {}}},
    }
    if spec.sm is not None:
        children["subnet_managers"] = {"hosts": {spec.sm.host: {}},
                                       "vars": {"fabtune_sm_flavor": spec.sm.flavor}}
    return {
        "all": {
            "vars": {
                "ansible_user": spec.login_user,
                "ansible_connection": "ssh",
                "ansible_ssh_private_key_file": str(tb_dir / "ssh/id_ed25519"),
                "ansible_ssh_common_args": ssh_args,
                "ansible_python_interpreter": "/usr/bin/python3",
                "fabtune_fabric": spec.fabric,
                "fabtune_testbed": spec.name,
                "fabtune_oob_interface": "eth0",
                # the roles escalate per task (become: true) where they need root
                **({"ansible_become_method": "sudo"} if spec.nonroot_login else {}),
            },
            "children": children,
        }
    }


def write_inventory(spec: TestbedSpec, tb_dir: Path) -> Path:
    """Write ``inventory.yml`` and return its path."""
    path = tb_dir / "inventory.yml"
    header = f"# Ansible inventory of fabtune testbed {spec.name!r} (generated by fabtune testbed up)\n"
    path.write_text(header + yaml.safe_dump(inventory(spec, tb_dir), sort_keys=False))
    return path
