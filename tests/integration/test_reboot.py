"""Settings that survive a reboot: a RoCE rack with the roce profile applied, every host rebooted.

``fabtune testbed reboot`` kills every process of a host, puts its NIC and kernel state back at the
power-on values (the spec's factory ``initial``), keeps its disk and runs its enabled boot units.
With fabtune-boot.service enabled the rack comes back with no drift and its tuned bandwidth; the
control (the unit disabled on every host, the same reboot) loses every NIC knob and the bandwidth.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune import drift
from fabtune.ansible import run_playbook
from fabtune.inventory import read_inventory
from fabtune.perf import nccl
from fabtune.perf.argv import NcclOptions
from fabtune.profile import load_profile
from fabtune.profile import packaged as packaged_profile
from fabtune.state import HostState
from fabtune.testbed import build
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.reboot import reboot
from fabtune.testbed.spec import TestbedSpec
from tests.integration.tunerack import build as build_rack
from tests.integration.tunerack import inventory

pytestmark = pytest.mark.testbed
NOISE = 0.05  # nccl-tests busbw varies by about 2 % run to run on the emulated fabric
WANTS = "/etc/systemd/system/multi-user.target.wants/fabtune-boot.service"
# fabtune-rdma-cm.service (role roce_tos) re-applies the RoCE ToS and mode at boot too.
WANTS_CM = "/etc/systemd/system/multi-user.target.wants/fabtune-rdma-cm.service"


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build_rack("rb1", "10.252", seed=41, lossless=3)  # the roce profile's lossless class


def _on(rack: TestbedSpec, host: str, command: str, check: bool = True) -> str:
    proc = subprocess.run(ssh_argv(rack.name, host, command), capture_output=True, text=True, timeout=120,
                          check=False)
    assert not check or proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _busbw(rack: TestbedSpec) -> float:
    """all_reduce bus bandwidth per GPU (GB/s), 64 MiB to 1 GiB, every host and GPU."""
    inv = inventory(rack)
    opts = NcclOptions(test="all_reduce_perf", min_bytes="64M", max_bytes="1G", gpus_per_process=2)
    run = nccl.run(inv, [h.name for h in rack.hosts], opts, {}, launcher="mpirun", oob_interface="eth0")
    assert run.result is not None and run.result.avg_busbw_gbps, run.output[-2000:]
    return float(run.result.avg_busbw_gbps)


def _drift(rack: TestbedSpec, desired: dict[str, object]) -> set[tuple[str, str, str, str]]:
    info = read_inventory(inventory(rack))
    return drift.detect(inventory(rack), HostState.from_tree(desired), info.hosts).as_tuples()


def test_a_rebooted_rack_keeps_its_settings_and_bandwidth_and_loses_them_without_the_unit(
    rack: TestbedSpec,
) -> None:
    desired = load_profile(packaged_profile(Path("roce"))).desired.tree()
    factory = _busbw(rack)
    applied = run_playbook("apply.yml", inventory(rack), extravars={"fabric_desired": desired})
    applied.raise_for_failure("apply")
    assert _drift(rack, desired) == set()
    tuned = _busbw(rack)
    assert tuned > factory * (1 + NOISE), (factory, tuned)  # the profile matters on this rack
    for host in rack.hosts:  # what a reboot forgets (/run, /tmp) and keeps (the disk)
        _on(rack, host.name, "touch /run/marker /tmp/marker /var/lib/marker")
    started = (build.load_state(rack.name) or {})["started"]

    assert reboot(rack.name) == [h.name for h in rack.hosts]

    assert (build.load_state(rack.name) or {})["started"] != started  # new init processes
    for host in rack.hosts:
        assert _on(rack, host.name, "ls /run/marker /tmp/marker /var/lib/marker", check=False).split() == [
            "/var/lib/marker"]
        assert _on(rack, host.name, "systemctl is-active fabtune-boot.service").strip() == "active"
    assert _drift(rack, desired) == set()
    again = _busbw(rack)
    assert abs(again / tuned - 1) < NOISE, (tuned, again)

    # The control: the same reboot with the units disabled loses every NIC knob and the bandwidth.
    for host in rack.hosts:
        _on(rack, host.name, f"rm {WANTS} {WANTS_CM}")
    reboot(rack.name)
    found = _drift(rack, desired)
    knobs = {(h, k.split(".", 1)[-1]) for h, k, _e, _f in found if "." in k and not k.startswith("/")}
    for host in rack.hosts:
        assert {(host.name, k) for k in ("trust", "pfc", "mtu", "roce_tos", "ecn")} <= knobs, found
        state = _on(rack, host.name, "systemctl is-active fabtune-boot.service", check=False)
        assert state.strip() == "inactive"
    lost = _busbw(rack)
    assert lost < tuned * (1 - NOISE), (factory, tuned, lost)  # /etc/nccl.conf stays: not the factory


def test_reboot_refuses_an_unknown_host_and_changes_nothing(rack: TestbedSpec) -> None:
    from fabtune.errors import ConfigError

    started = (build.load_state(rack.name) or {})["started"]
    with pytest.raises(ConfigError, match="'h09' is not a host of testbed 'rb1'"):
        reboot(rack.name, ["h09"])
    assert (build.load_state(rack.name) or {})["started"] == started


def test_the_boot_units_run_in_their_after_order(rack: TestbedSpec) -> None:
    """Two units enabled on h01, aa-first ordered After=zz-second: zz-second runs first."""
    wants = WANTS.rsplit("/", 1)[0]
    for name, after in (("aa-first", "zz-second.service"), ("zz-second", "")):
        unit = (f"[Unit]\nAfter={after}\n[Service]\nType=oneshot\n"
                f'ExecStart=/bin/sh -c "echo {name} >> /var/lib/order"\n'
                "[Install]\nWantedBy=multi-user.target\n")
        path = f"/etc/systemd/system/{name}.service"
        _on(rack, "h01", f"printf %s {shlex.quote(unit)} > {path} && ln -sf {path} {wants}/")
    reboot(rack.name, ["h01"])
    assert _on(rack, "h01", "cat /var/lib/order").split() == ["zz-second", "aa-first"]
