"""fabtune tune end to end on a misconfigured testbed rack: reaches the oracle, rollbacks verified."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune import rollback as rollbacks
from fabtune.journal import Journal
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import preview
from fabtune.tune import run as tune_run
from tests.integration.tunerack import FAST, build, current_state, drift_from, inventory
from tests.unit.test_report_render import CHROMIUM, render

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from build("ittune", "10.213", 21)


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_tune_reaches_the_oracle_and_verifies_rollbacks(
    rack: TestbedSpec, tmp_path: Path
) -> None:
    before = current_state(rack)
    runs = len(Journal().runs(10_000))
    plan = preview.preview(inventory(rack), FAST)  # `fabtune tune --plan`: reads, changes nothing
    assert drift_from(before, rack) == {"h01": [], "h02": []} and len(Journal().runs(10_000)) == runs
    result, report = tune_run.tune(inventory(rack), FAST, oracle=testbed_model.testbed_oracle)
    assert [[m.name for m in group] for group in plan.groups] == result.planned  # the plan the run made
    assert plan.skipped_groups == ("qps", "gdr") and plan.bounds.baseline_repetitions == FAST["baseline_runs"]
    doc = json.loads(report.read_text())
    assert doc["oracle"]["share_of_best"] >= 0.99, doc["oracle"]
    # The outcome, not one seed's path to it (issue 13.9): which moves get kept depends on the
    # model's calibration; that the rack ends at the oracle's best with no unconfident keep does not.
    kept = [m for m in result.moves if m.outcome == "kept"]
    assert kept, [(m.name, m.outcome) for m in result.moves]
    for move in kept:  # every kept move improved a bandwidth with confidence
        assert "keep" in (move.decision.all_reduce.verdict, move.decision.alltoall.verdict)
    assert statistics.median(result.final) > statistics.median(result.baseline)  # lists in run order
    steps = Journal().steps(result.run_id)
    undone = [s for s in steps if s.kind == "move" and s.state == "rolled_back"]
    assert undone and all(s.payload["verified"] for s in undone)
    assert Path(doc["tune"]["tuned_desired"]).exists()
    if CHROMIUM is not None:  # the HTML report of this testbed run, rendered and kept as a screenshot
        print(f"screenshot: {render(report.with_suffix('.html'), 'report-tune-testbed.png', tmp_path)}")
    rollbacks.rollback(result.run_id)
    assert drift_from(before, rack) == {"h01": [], "h02": []}


