"""Fault matrix: a host rebooted mid-run, after a move was applied and armed, before it was confirmed.

The reboot ends the host's transient revert timer and puts its NIC settings back at their power-on
values. fabtune-boot.service must first revert the unconfirmed move from its revert record (so the
host is at the journaled pre-move state, not at the factory defaults and not at the move), and the
persisted state it applies after that must not re-apply the move. The controller, paused during
the reboot, then finds the host reverted (its confirm says so), and the run ends failed with every
host back at the journaled state.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.ansible import run_playbook
from fabtune.journal import Journal
from fabtune.testbed import layout
from fabtune.testbed.reboot import reboot
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import (
    CLEAN,
    ONE_MOVE,
    cli,
    current_state,
    drift_from,
    factory_rack,
    inventory,
    tune_child,
    wait_step,
)

pytestmark = pytest.mark.testbed
EARLIER = {"nics": {"all": {"mtu": 4200}}}  # not a knob of the move (ONE_MOVE skips the MTU group)


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("rb2", "10.249")


def _boot_log(rack: TestbedSpec, host: str) -> str:
    path = layout.testbed_dir(rack.name) / "hosts" / host / "upper/var/log/fabtune-boot.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_host_rebooted_mid_run_boots_at_the_pre_move_state_and_the_run_fails_cleanly(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    # The pre-run state is not the power-on state: an earlier apply set (and persisted) MTU 4200, so a
    # host that lost everything is told apart from one at the journaled pre-move state.
    earlier = run_playbook("apply.yml", inventory(rack), extravars={"fabric_desired": EARLIER})
    earlier.raise_for_failure("apply")
    before = current_state(rack)
    assert drift_from(before, rack) == CLEAN
    child = tune_child(rack, tmp_path, ONE_MOVE)
    try:
        run, _ = wait_step(child, lambda r, s: s.kind == "move" and s.state == "applied")
        child.pause()
        moved = drift_from(before, rack)
        assert moved["h01"] and moved["h02"], moved  # the move is on both hosts, armed, unconfirmed
        assert reboot(rack.name, ["h02"]) == ["h02"]
        after_boot = drift_from(before, rack)
        assert after_boot["h02"] == [], after_boot  # the journaled pre-move state, MTU 4200 included
        assert after_boot["h01"] == moved["h01"]  # the other host still holds the move
        assert f"run {run.id}: armed but never confirmed" in _boot_log(rack, "h02")
        child.pause(False)
        rc = child.wait(timeout=900)
    finally:
        child.kill9()
    text = child.output()
    assert rc != 0, text[-3000:]
    assert "h02" in text, text[-3000:]
    journal = Journal()
    failed = journal.run(run.id)
    assert failed.state == "failed", failed
    (move,) = [s for s in journal.steps(run.id) if s.kind == "move"]
    if move.state == "rolled_back":  # the usual end: the confirm found h02 reverted
        assert move.payload["reverted_by_host"] == ["h02"] == move.payload["rebooted"], move.payload
        assert "h02 rebooted before the move was decided" in text, text[-3000:]
        assert drift_from(before, rack) == CLEAN
    else:  # h02's reboot failed a task of the controller's instead: the rollback restores every host
        assert "h02" in str(failed.summary.get("error")), failed.summary
        done = cli("rollback", run.id)
        assert done.returncode == 0, done.stdout + done.stderr
        assert drift_from(before, rack) == CLEAN


def test_a_second_boot_keeps_the_pre_run_state(rack: TestbedSpec) -> None:
    """Nothing armed is left: another reboot applies the persisted (pre-move) state, MTU 4200 with it."""
    before = current_state(rack)
    reboot(rack.name)
    logs = {h.name: _boot_log(rack, h.name)[-1500:] for h in rack.hosts}
    assert drift_from(before, rack) == CLEAN, logs
    assert all("FAILED" not in log for log in logs.values()), logs
    out = subprocess.run(
        ["ls", str(layout.testbed_dir(rack.name) / "hosts/h02/upper/var/lib/fabtune/revert")],
        capture_output=True, text=True, timeout=30, check=False,
    ).stdout.split()
    assert not [n for n in out if n.endswith(".json") and not n.endswith((".reverted.json", ".prerun.json"))]
