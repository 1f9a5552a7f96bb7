"""Fault matrix: the host-side revert fires while the controller is alive and still measuring.

The hosts undo the move by themselves mid-measurement: the controller is paused (SIGSTOP) once the
move is applied, the testbed's clock lets the revert deadline go by (``fabtune.testbed.clock``),
the hosts revert, and the controller goes on measuring. It must find out before its decision takes
effect (keep and roll back both confirm the run first thing, and a reverted host answers so),
discard those runs, restore every host to the state before the move (verified), journal why, and
stop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed import clock
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import (
    CLEAN,
    ONE_MOVE,
    current_state,
    drift_from,
    factory_rack,
    tune_child,
    wait_step,
)

pytestmark = pytest.mark.testbed
PAST_ANY_DEADLINE_S = 3600  # past the armed deadline and the apply's allowance on top of it


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("frev", "10.247")


def _wait_reverted(rack: TestbedSpec, before: dict[str, dict[str, object]], timeout: float) -> None:
    end = time.monotonic() + timeout
    while drift_from(before, rack) != CLEAN and time.monotonic() < end:
        time.sleep(0.5)
    assert drift_from(before, rack) == CLEAN, "the hosts did not revert the move by themselves"


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_revert_firing_mid_measurement_is_found_journaled_and_undone(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    child = tune_child(rack, tmp_path, ONE_MOVE)
    try:
        run, _ = wait_step(child, lambda r, s: s.kind == "move" and s.state == "applied")
        child.pause()
        try:
            moved = clock.advance(rack.name, PAST_ANY_DEADLINE_S)  # the deadline goes by mid-measurement
            assert all(moved.values()), moved  # every host held the move, armed
            _wait_reverted(rack, before, 30)
        finally:
            child.pause(False)
        rc = child.wait(timeout=900)
    finally:
        child.kill9()
    text = child.output()
    assert rc == ExitStatus.CONFIG, text[-3000:]
    assert "host-side revert fired" in text and "revert_deadline_s" in text
    failed = Journal().run(run.id)
    assert failed.state == "failed"
    (move,) = [s for s in Journal().steps(run.id) if s.kind == "move"]
    assert move.state == "rolled_back" and move.payload["verified"]
    assert sorted(move.payload["reverted_by_host"]) == ["h01", "h02"]
    assert drift_from(before, rack) == CLEAN
