"""fabtune tune end to end on a misconfigured testbed rack, and kill -9 mid-move."""

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

from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.loop import restore_and_verify
from fabtune.tune.state import differences, snapshot_of
from tests.integration.conftest import make_testbed
from tests.unit.test_report_render import CHROMIUM, render

pytestmark = pytest.mark.testbed

FACTORY_NICS = {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500}
FAST = {"max_runs": 6, "baseline_runs": 4, "skip_groups": ["qps", "gdr"]}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    """Factory NICs (trust pcp, no PFC, MTU 1500, ToS 0) behind switches lossless on priority 4."""
    yield from make_testbed(
        {
            "name": "ittune",
            "hosts": 2,
            "subnet_base": "10.213",
            "nics_per_host": 2,
            "gpus_per_host": 2,
            "seed": 21,
            "initial": FACTORY_NICS,
            "switch": {"pfc_priorities": [4], "ecn_priorities": [4]},
        }
    )


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def current_state(spec: TestbedSpec) -> dict[str, dict[str, object]]:
    backend = AnsibleBackend(read_inventory(inventory(spec)))
    return {h: snapshot_of(f) for h, f in backend.facts().items()}


@pytest.fixture(scope="module")
def factory(rack: TestbedSpec) -> dict[str, dict[str, object]]:
    """The rack's state as built, before any test tunes it."""
    return current_state(rack)


@pytest.fixture
def at_factory(rack: TestbedSpec, factory: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """Each test starts from the rack as built, whatever an earlier test left."""
    if any(differences(factory[h], s) for h, s in current_state(rack).items()):
        restore_and_verify(AnsibleBackend(read_inventory(inventory(rack))), factory)
    return factory


def test_tune_reaches_the_oracle_and_verifies_rollbacks(
    rack: TestbedSpec, at_factory: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    before = at_factory
    result, report = tune_run.tune(inventory(rack), FAST, oracle=tune_run.testbed_oracle)
    doc = json.loads(report.read_text())
    assert doc["oracle"]["share_of_best"] >= 0.99, doc["oracle"]
    kept = [m for m in result.moves if m.outcome == "kept"]
    assert [m.name for m in kept] == ["lossless priority 4", "MTU 4200"]
    for move in kept:  # every kept move improved a bandwidth with confidence
        assert "keep" in (move.decision["all_reduce"]["verdict"], move.decision["alltoall"]["verdict"])
    assert result.final[len(result.final) // 2] > result.baseline[len(result.baseline) // 2]
    steps = Journal().steps(result.run_id)
    undone = [s for s in steps if s.kind == "move" and s.state == "rolled_back"]
    assert undone and all(s.payload["verified"] for s in undone)
    assert Path(doc["tune"]["tuned_desired"]).exists()
    if CHROMIUM is not None:  # the HTML report of this testbed run, rendered and kept as a screenshot
        print(f"screenshot: {render(report.with_suffix('.html'), 'report-tune-testbed.png', tmp_path)}")
    tune_run.rollback(result.run_id)
    assert [d for h in before for d in differences(before[h], current_state(rack)[h])] == []


def _wait_for_move(run_dir: Path, timeout: float, decided: int = 0) -> tuple[str, int]:
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
    raise AssertionError(f"no move was applied in time: {(run_dir / 'tune.out').read_text()[-2000:]}")


def test_kill_9_mid_move_hosts_revert_resume_finishes_then_rollback_restores(
    rack: TestbedSpec, at_factory: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    before = at_factory
    profile = tmp_path / "profile.yml"
    profile.write_text(json.dumps({"fabtune_tune": {**FAST, "revert_deadline_s": 45}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabtune", "tune", "-i", str(inventory(rack)), "--profile", str(profile)],
        env=os.environ.copy(),
        stdout=(tmp_path / "tune.out").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        run_id, seq = _wait_for_move(tmp_path, 400, decided=1)  # the second move, the first one decided
        moved = current_state(rack)
        assert [d for h in before for d in differences(before[h], moved[h])] != []
        os.killpg(proc.pid, signal.SIGKILL)  # the controller and its ansible-playbook children die at once
    finally:
        proc.kill()
        proc.wait()
    snapshot = Journal().snapshot_at(run_id, seq)
    deadline = time.monotonic() + 45 + 30
    while time.monotonic() < deadline:
        if all(differences(snapshot[h], s) == [] for h, s in current_state(rack).items()):
            break
        time.sleep(5)
    assert {h: differences(snapshot[h], s) for h, s in current_state(rack).items()} == {"h01": [], "h02": []}
    first = [s for s in Journal().steps(run_id) if s.kind == "move" and s.seq < seq]
    result, _ = tune_run.resume(run_id)
    steps = Journal().steps(run_id)
    interrupted = next(s for s in steps if s.seq == seq)
    assert interrupted.state == "rolled_back" and interrupted.payload["reason"].startswith("interrupted")
    assert [m.name for m in result.moves if m.name == first[0].name] == []  # decided moves are not retried
    assert Journal().run(run_id).state == "done" and all(
        s.state in ("kept", "rolled_back") for s in steps if s.kind == "move"
    )
    assert "lossless priority 4" in [m.name for m in result.moves if m.outcome == "kept"]
    tune_run.rollback(run_id)
    assert {h: differences(before[h], s) for h, s in current_state(rack).items()} == {"h01": [], "h02": []}
