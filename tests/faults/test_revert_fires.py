"""Fault matrix: the host-side revert fires while the controller is alive and still measuring.

A revert deadline (30 s) shorter than one move's apply and measurement (16 runs): the hosts undo
the move by themselves mid-measurement. The controller must find out before its decision takes
effect (keep and roll back both confirm the run first thing, and a reverted host answers so),
discard those runs, restore every host to the state before the move (verified), journal why, and
stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import CLEAN, ONE_MOVE, cli, current_state, drift_from, factory_rack, inventory, profile

pytestmark = pytest.mark.testbed
RUNS = 16  # one batch of 16 runs outlasts 30 s on any machine (each launches two nccl-tests jobs)
OPTIONS = {**ONE_MOVE, "baseline_runs": RUNS, "min_runs": RUNS, "max_runs": RUNS, "revert_deadline_s": 30}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("frev", "10.247")


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_revert_firing_mid_measurement_is_found_journaled_and_undone(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    out = cli("tune", "-i", str(inventory(rack)), "--profile", str(profile(tmp_path, OPTIONS)))
    text = out.stdout + out.stderr
    assert out.returncode == ExitStatus.CONFIG, text
    assert "host-side revert fired" in text and "revert_deadline_s" in text
    run = Journal().runs(1)[0]
    assert run.state == "failed"
    (move,) = [s for s in Journal().steps(run.id) if s.kind == "move"]
    assert move.state == "rolled_back" and move.payload["verified"]
    assert move.payload["reverted_by_host"]  # named hosts, not an empty list
    assert drift_from(before, rack) == CLEAN
