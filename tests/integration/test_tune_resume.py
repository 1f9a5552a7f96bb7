"""kill -9 of `fabtune tune` mid-move: the hosts revert themselves, `resume` undoes the interrupted
move (verified) and finishes the run, and `rollback` restores the exact pre-run state.

(That resume skips the moves already decided is tested on the loop, in tests/unit/test_tune_loop.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune import rollback as rollbacks
from fabtune.advise.gate import Goal
from fabtune.advise.job import parse_job
from fabtune.errors import ConfigError
from fabtune.journal import Journal
from fabtune.testbed import clock
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from tests.integration.tunerack import FAST, build, current_state, drift_from, inventory

pytestmark = pytest.mark.testbed

DEADLINE_S = 60
OPTIONS = {**FAST, "skip_groups": [*FAST["skip_groups"], "mtu"], "revert_deadline_s": DEADLINE_S}
CLEAN = {"h01": [], "h02": []}
# A data-parallel job (``--model``): the resumed run journals its predicted MFU at 16 nodes.
JOB = {"name": "dp8b", "params": 8e9, "layers": 32, "hidden": 4096, "seq_len": 4096,
       "global_batch": 256, "micro_batch": 2, "peak_tflops": 989}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("itresu", "10.214", 22, lossless=3)  # the first move is the right one


def _wait_for_move(out: Path, timeout: float, decided: int) -> tuple[str, int]:
    """The run and step of the first move applied after ``decided`` moves were decided."""
    deadline = time.monotonic() + timeout
    journal = Journal()
    while time.monotonic() < deadline:
        for run in journal.runs(5):
            moves = [s for s in journal.steps(run.id) if s.kind == "move"]
            done = [s for s in moves if s.state in ("kept", "rolled_back")]
            applied = [s for s in moves if s.state == "applied"]
            if len(done) >= decided and applied and run.state == "running":
                return run.id, applied[0].seq
        time.sleep(0.5)
    raise AssertionError(f"no move was applied in time: {out.read_text()[-2000:]}")


def _kill_at_first_move(rack: TestbedSpec, tmp_path: Path) -> tuple[str, int]:
    profile = tmp_path / "profile.yml"
    profile.write_text(json.dumps({"fabtune_tune": OPTIONS}))
    out = tmp_path / "tune.out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabtune", "tune", "-i", str(inventory(rack)), "--profile", str(profile)],
        env=os.environ.copy(),
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        run_id, seq = _wait_for_move(out, 300, decided=0)
        os.killpg(proc.pid, signal.SIGKILL)  # the controller and its ansible-playbook children die at once
    finally:
        proc.kill()
        proc.wait()
    return run_id, seq


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_kill_9_mid_move_hosts_revert_resume_finishes_then_rollback_restores(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    run_id, seq = _kill_at_first_move(rack, tmp_path)
    assert Journal().run(run_id).state == "interrupted"  # journaled running, its process gone (kill -9)
    snapshot = Journal().snapshot_at(run_id, seq)  # the state before the interrupted move
    # The hosts revert the move by themselves at their deadline; the testbed's clock lets that time
    # pass (past the deadline and the apply's allowance on top of it) instead of the test waiting.
    # The controller may have died while a host was moving its deadline (an extension over SSH goes
    # on without it, and re-arms the timer a moment later, for the whole deadline): time goes on
    # passing for that timer too, as it would on a rack.
    deadline = time.monotonic() + 60
    clock.advance(rack.name, DEADLINE_S + 3600)
    while drift_from(snapshot, rack) != CLEAN and time.monotonic() < deadline:
        time.sleep(1)
        clock.advance(rack.name, DEADLINE_S + 3600)
    assert drift_from(snapshot, rack) == CLEAN  # the hosts reverted the move by themselves

    goal = Goal(parse_job(JOB, "job"), nodes=16)
    result, _ = tune_run.resume(run_id, raw_options={**OPTIONS, "revert_deadline_s": 300}, goal=goal)
    steps = Journal().steps(run_id)
    (job,) = [s for s in steps if (s.kind, s.name) == ("job", "job prediction")]
    assert job.payload["nodes"] == 16 and job.payload["job"]["name"] == "dp8b"
    assert all(job.payload["predictions"][p]["mfu"] > 0 for p in ("baseline", "final")), job.payload
    interrupted = next(s for s in steps if s.seq == seq)
    assert interrupted.name == "lossless priority 3"
    assert interrupted.state == "rolled_back" and interrupted.payload["reason"].startswith("interrupted")
    assert [(m.name, m.outcome) for m in result.moves] == [("lossless priority 3", "kept")]
    assert Journal().run(run_id).state == "done"
    assert all(s.state in ("kept", "rolled_back") for s in steps if s.kind == "move")
    with pytest.raises(ConfigError, match="only an interrupted or failed tune run can be resumed"):
        tune_run.resume(run_id)

    rollbacks.rollback(run_id)
    assert drift_from(before, rack) == CLEAN
