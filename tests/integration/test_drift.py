"""Drift on a 4-host testbed: 3 knobs changed by hand on 2 hosts are found, remediated, verified."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune import drift
from fabtune.cli import cli, main
from fabtune.commands.drift import drift as drift_command
from fabtune.desired import save_tuned
from fabtune.errors import ExitStatus
from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.profile import load_profile
from fabtune.testbed import layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.spec import TestbedSpec
from tests.integration.conftest import make_testbed
from tests.unit.test_drift import parse_exposition

pytestmark = pytest.mark.testbed

TUNED = {
    "trust": "dscp",
    "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
    "ecn_np": [0, 0, 0, 1, 0, 0, 0, 0],
    "ecn_rp": [0, 0, 0, 1, 0, 0, 0, 0],
    "roce_tos": 106,
    "mtu": 4200,
}
PROFILE = """\
fabric_desired:
  nics:
    all:
      trust: dscp
      dscp2prio: {26: 3, 48: 6}
      pfc: [3]
      mtu: 4200
      ecn: {np: [3], rp: [3]}
      cnp_dscp: 48
      cnp_prio: 6
      roce_tos: 106
      roce_mode: 2
"""


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed(
        {
            "name": "itdrif",
            "fabric": "roce",
            "hosts": 4,
            "subnet_base": "10.207",
            "seed": 7,
            "nics_per_host": 1,
            "gpus_per_host": 1,
            "initial": TUNED,
            "switch": {"pfc_priorities": [3], "ecn_priorities": [3]},
        }
    )


@pytest.fixture(scope="module")
def inventory(rack: TestbedSpec) -> Path:
    return layout.testbed_dir(rack.name) / "inventory.yml"


def _fabtune(*args: str) -> int:
    if "drift" not in cli.commands:
        cli.add_command(drift_command)
    return main(list(args))


def _netdev(rack: TestbedSpec) -> str:
    return layout.nic_netdev(rack, 0)


# Apply, six hand changes, detect, remediate with bandwidth runs before and after: over 600 s on a
# loaded 2-CPU machine since applies also persist the knobs for fabtune-boot.
@pytest.mark.timeout(1500)
def test_drift_finds_exactly_the_six_hand_changes_and_remediates_them(
    rack: TestbedSpec, inventory: Path, tmp_path: Path
) -> None:
    profile = tmp_path / "profile.yml"
    profile.write_text(PROFILE)
    info = read_inventory(inventory)
    # the tuned desired state a tuning run would have left; bring the rack to it
    save_tuned(info.name, load_profile(profile).desired, "itest")
    desired = drift.desired_for(info, None)
    from fabtune.ansible import run_playbook

    run_playbook(
        "apply.yml", inventory, extravars={"fabric_desired": desired.desired.tree()}
    ).raise_for_failure("apply")
    assert not drift.detect(inventory, desired.desired, info.hosts).drifted

    netdev = _netdev(rack)
    for host in ("h02", "h04"):
        for command in (
            f"mlnx_qos -i {netdev} --pfc 0,0,0,0,0,0,0,0",
            f"echo 0 > /sys/class/net/{netdev}/ecn/roce_np/enable/3",
            f"ip link set {netdev} mtu 1500",
        ):
            subprocess.run(ssh_argv(rack.name, host, command), check=True, capture_output=True, timeout=60)

    textfile = tmp_path / "collector" / "fabtune.prom"
    assert _fabtune("drift", "-i", str(inventory), "--textfile", str(textfile)) == ExitStatus.DRIFT_FOUND
    report = drift.detect(inventory, desired.desired, info.hosts)
    assert report.as_tuples() == {
        (h, knob, expected, found)
        for h in ("h02", "h04")
        for knob, expected, found in (
            (f"{netdev}.pfc", "[3]", "[]"),
            (f"{netdev}.ecn", "{np: [3], rp: [3]}", "{np: [], rp: [3]}"),
            (f"{netdev}.mtu", "4200", "1500"),
        )
    }
    families = parse_exposition(textfile.read_text())
    knobs = {s[0]["host"]: s[1] for s in families["fabtune_drift_knobs"]["samples"]}
    assert knobs == {"h01": 0.0, "h02": 3.0, "h03": 0.0, "h04": 3.0}

    rc = _fabtune("drift", "-i", str(inventory), "--remediate", "--textfile", str(textfile))
    families = parse_exposition(textfile.read_text())
    assert rc == ExitStatus.OK, families
    assert all(s[1] == 0.0 for s in families["fabtune_drift_knobs"]["samples"])
    assert families["fabtune_drift_found_knobs"]["samples"]
    assert families["fabtune_drift_remediation_rolled_back"]["samples"][0][1] == 0.0
    phases = {
        (s[0]["benchmark"], s[0]["stat"], s[0]["phase"])
        for s in families["fabtune_bandwidth_gbps"]["samples"]
    }
    assert ("ib_write_bw", "mean", "after") in phases and ("all_reduce_busbw", "mean", "after") in phases
    assert not drift.detect(inventory, desired.desired, info.hosts).drifted

    journal = Journal()
    try:
        runs = [r for r in journal.runs() if r.kind == "drift" and r.fabric == info.name]
        assert runs[0].state == "remediated" and runs[1].state == "drift"
        steps = [s.name for s in journal.steps(runs[0].id)]
        assert steps[:3] == ["drift check", "pre-remediation facts", "before"]
        assert sorted(journal.first_snapshot(runs[0].id)) == ["h02", "h04"]
    finally:
        journal.close()
