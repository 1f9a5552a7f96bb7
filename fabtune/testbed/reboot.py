"""``testbed reboot``: power-cycle emulated hosts, as a real reboot would leave them.

What a reboot does to a real GPU node, and what this does to an emulated one:

* **Every process ends** and the host starts again from its init: the host's init (recorded in
  ``state.json``) and every process in its network namespace are killed, and a new init is started
  the way ``up`` starts one (``state.json`` records its pid and start time before ``up``'s
  ``down`` needs them). Its fresh mount namespace brings an empty tmpfs ``/run``, ``/tmp`` and
  ``/dev/shm``: the transient revert timers (``/run/systemd/transient``) are gone, as systemd's
  transient units are after a reboot (systemd-run(1): transient units "are not persisted").
* **Memory forgets, the disk keeps**: the overlay's upper directory (``/etc``, ``/usr/local``,
  ``/var/lib``, ``/root``: the host's disk) is kept, so the SSH host key and fabtune's files stay.
  What the kernel and the NIC driver hold in memory goes back to its power-on value: sysfs and
  configfs are RAM-based (Documentation/filesystems/sysfs.rst and configfs.rst of the kernel), and
  DCB (PFC, ETS, APP table), the mlx5 ``qos``/``ecn`` files and the rdma_cm defaults are set per
  boot ("not persistent", NVIDIA's mlnx_qos documentation; the reason fabtune-boot exists). The
  emulated NIC tree (``sys/class``, ``configfs``, ``emu/dcb``, ``emu/ethtool``) is provisioned
  again from ``emu/node.json`` and ``emu/initial.json`` (the spec's ``initial`` settings: the NIC's
  power-on state) and each emulated port's netdev MTU is set back to its initial MTU. Counters
  restart at zero, as after a driver load.
* **Firmware keeps its settings**: what ``mlxconfig`` writes is in the NIC's non-volatile memory
  (NVIDIA MFT user manual, mlxconfig) and survives; the emulated NIC has no such settings beyond
  its hardware description (``node.json``: firmware version, GUIDs, LIDs), which is kept.
* **The network configuration comes back**: the ports keep their addresses and the links stay in
  the switch (the host's network configuration would restore them at boot).
* **Boot units run**: the new init starts the units enabled for ``multi-user.target``
  (``fabtune.sim.tools.systemd.boot_main``) before its sshd, which comes back with the same host key.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fabtune.errors import TestbedError
from fabtune.testbed import build, layout, system
from fabtune.testbed.layout import Names
from fabtune.testbed.spec import HostSpec, TestbedSpec

# The parts of a host directory that stand for its NIC's and kernel's memory (reset on reboot).
VOLATILE = ("sys", "configfs", "emu/dcb", "emu/ethtool")


def reboot(name: str, hosts: Sequence[str] = (), progress: build.Progress = build._quiet) -> list[str]:
    """Reboot ``hosts`` of testbed ``name`` (every host when empty); return the hosts rebooted.

    Raises:
        ConfigError: a host the testbed does not have.
        TestbedError: no such testbed, or a host did not come back (its sshd).
    """
    build.preflight()
    spec = build.load_spec_of(name)
    names = build.chosen_hosts(spec, hosts, "testbed reboot", "HOST")
    chosen = [h for h in spec.hosts if h.name in names]
    tb_dir = layout.testbed_dir(name)
    for host in chosen:
        progress(f"host {host.name}: power off")
        _power_off(name, host)
        _reset_volatile(spec, host, tb_dir / "hosts" / host.name)
    for host in chosen:
        progress(f"host {host.name}: boot")
        _power_on(spec, host, tb_dir)
    progress("waiting for sshd")
    build._wait_for_sshd(spec, tb_dir)
    return [h.name for h in chosen]


def _power_off(name: str, host: HostSpec) -> None:
    """Kill the host's init (if it is still the recorded process) and every process of its netns."""
    state = build.load_state(name) or {}
    killed: list[int] = []
    pid, started = state.get("pids", {}).get(host.name), state.get("started", {}).get(host.name)
    if isinstance(pid, int) and isinstance(started, int) and build._kill_if(pid, started):
        killed.append(pid)
    netns = Names(name).netns(host.name)
    if netns in system.netns_list():
        killed += build._kill_netns(netns)
    build._wait_gone(killed)
    left = [p for p in killed if Path(f"/proc/{p}").exists() and build._alive(p)]
    if left:
        raise TestbedError(f"host {host.name}: processes {left} did not end; not rebooted")


def _reset_volatile(spec: TestbedSpec, host: HostSpec, host_dir: Path) -> None:
    """Put the emulated NIC and kernel state back at its power-on values (see the module doc)."""
    from fabtune.sim.node import provision  # the emulated hardware

    node = json.loads((host_dir / "emu" / "node.json").read_text())
    initial: dict[str, Any] = json.loads((host_dir / "emu" / "initial.json").read_text())
    for part in VOLATILE:
        shutil.rmtree(host_dir / part, ignore_errors=True)
    (host_dir / "sys" / "class").mkdir(parents=True)
    (host_dir / "configfs").mkdir()
    with build._umask(build.HOST_UMASK):
        provision(host_dir, node, initial)
    netns = Names(spec.name).netns(host.name)
    for rail in range(spec.nics_per_host):
        dev = layout.nic_netdev(spec, rail)
        system.ip("link", "set", dev, "mtu", str(initial["mtu"]), netns=netns)


def _power_on(spec: TestbedSpec, host: HostSpec, tb_dir: Path) -> None:
    """Start the host's init again and record it in state.json (``down`` kills what it records)."""
    with build._umask(build.HOST_UMASK):
        pid = build._start_host(spec, Names(spec.name), host, tb_dir)
    state = build.load_state(spec.name)
    if state is None:
        raise TestbedError(f"testbed {spec.name!r}: state.json vanished during the reboot")
    state.setdefault("pids", {})[host.name] = pid
    state.setdefault("started", {})[host.name] = build._start_time(pid)
    state.setdefault("reboots", {})[host.name] = int(state.get("reboots", {}).get(host.name, 0)) + 1
    tmp = tb_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(tb_dir / "state.json")
