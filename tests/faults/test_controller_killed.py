"""Fault matrix: the controller killed with SIGKILL mid-apply, mid-measure and mid-rollback.

Each row: every host ends at the state the journal holds for it (after ``fabtune rollback``, the
pre-run snapshot) and the journal shows the run as what happened to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import (
    CLEAN,
    ONE_MOVE,
    Child,
    cli,
    current_state,
    drift_from,
    factory_rack,
    tune_child,
    wait_step,
)

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("fkill", "10.243")


def _tune(rack: TestbedSpec, tmp_path: Path) -> Child:
    return tune_child(rack, tmp_path, ONE_MOVE)


def _killed_at(rack: TestbedSpec, tmp_path: Path, state: str) -> tuple[str, int]:
    child = _tune(rack, tmp_path)
    try:
        run, step = wait_step(
            child, lambda r, s: r.state == "running" and s.kind == "move" and s.state == state
        )
        time.sleep(3)  # well inside the apply playbook (intent) or the first nccl-tests batch (applied)
        assert child.proc.poll() is None, child.output()[-2000:]
    finally:
        child.kill9()
    return run.id, step.seq


def _rolled_back_to(rack: TestbedSpec, run_id: str, before: dict[str, dict[str, object]]) -> None:
    done = cli("rollback", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert drift_from(before, rack) == CLEAN
    assert Journal().run(run_id).state == "rolled_back"
    assert Journal().first_snapshot(run_id) == before


@pytest.mark.timeout(1500)  # a tune to the kill point, then a rollback: minutes on a loaded machine
def test_kill_9_mid_apply_then_rollback_restores_the_pre_run_state(rack: TestbedSpec, tmp_path: Path) -> None:
    before = current_state(rack)
    run_id, seq = _killed_at(rack, tmp_path, "intent")
    assert Journal().run(run_id).state == "interrupted"  # its process is dead: not "running"
    assert Journal().snapshot_at(run_id, seq) == before  # the move's snapshot was journaled before any change
    _rolled_back_to(rack, run_id, before)


@pytest.mark.timeout(1500)  # a tune to the kill point, then a rollback: minutes on a loaded machine
def test_kill_9_mid_measure_then_rollback_restores_the_pre_run_state(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    run_id, _ = _killed_at(rack, tmp_path, "applied")
    assert drift_from(before, rack) != CLEAN  # the move was on the hosts when the controller died
    _rolled_back_to(rack, run_id, before)


@pytest.mark.timeout(1500)  # a tune to the kill point, then a rollback: minutes on a loaded machine
def test_kill_9_mid_rollback_then_rollback_again_restores(rack: TestbedSpec, tmp_path: Path) -> None:
    before = current_state(rack)
    run_id, _ = _killed_at(rack, tmp_path, "applied")
    undo = Child.start(tmp_path, "rollback", run_id)
    try:
        wait_step(
            undo,
            lambda r, s: r.id == run_id and s.kind == "rollback" and s.state == "intent",
            new_run=False,
        )
        time.sleep(3)  # inside the restoring apply
    finally:
        undo.kill9()
    _rolled_back_to(rack, run_id, before)
    rollbacks = [s for s in Journal().steps(run_id) if s.kind == "rollback"]
    assert [s.state for s in rollbacks] == ["intent", "done"]  # the killed one stays an open intent
