"""The tuning run's typed step payloads: what the loop journals reads back to the same JSON, and a
payload of an older journal reads with the defaults the report shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fabtune.errors import BenchmarkError
from fabtune.journal import Step
from fabtune.perf.pairs import PairResult
from fabtune.report.build import build
from fabtune.tune.payloads import (
    BaselineFailedPayload,
    BaselinePayload,
    FactsPayload,
    FailedRunPayload,
    FinalPayload,
    MetricDecision,
    MoveDecision,
    MoveIntent,
    MoveOutcome,
    PairsPayload,
    PairsUnavailablePayload,
    ResultPayload,
    undone_on_resume,
)
from tests.unit.test_tune_loop import FakeRack, tuner

Reader = Callable[[Any], Any]


class MatrixRack(FakeRack):
    """A rack whose pair matrix measures one pair twice, then cannot run."""

    def pair_matrix(self, full: bool) -> list[PairResult]:
        if self.pair_rounds >= 2:
            raise BenchmarkError("ib_write_bw: no servers")
        self.pair_rounds += 1
        return [PairResult("h01", "h02", 0, "mlx5_0", 90.0, 97.0, counters={"h01:eth2": {"rx_pause": 3}})]


def _reader(step: Step) -> Reader | None:
    """The payload type of a tuning step, by kind, name and state (None: not typed)."""
    if step.kind == "move":
        return MoveOutcome.from_json if step.state in ("kept", "rolled_back") else MoveIntent.from_json
    if step.kind == "pairs":
        return PairsPayload.from_json
    by_phase: dict[tuple[str, str], Reader] = {
        ("facts", "done"): FactsPayload.from_json,
        ("baseline", "done"): BaselinePayload.from_json,
        ("baseline", "failed"): BaselineFailedPayload.from_json,
        ("final", "done"): FinalPayload.from_json,
    }
    return by_phase.get((step.name, step.state)) if step.kind == "phase" else None


def test_every_payload_a_run_journals_reads_back_to_the_same_json(tmp_path: Path) -> None:
    t = tuner(MatrixRack(lossless_prio=4), tmp_path)
    t.run()
    t.measure_pair_matrix("again")  # a round that cannot run
    steps = t.journal.steps(t.run_id)
    typed = [(s, reader) for s in steps if (reader := _reader(s)) is not None]
    kinds = {(s.kind, s.state) for s, _ in typed}
    want = {("move", "kept"), ("move", "rolled_back"), ("phase", "done")}
    assert want | {("pairs", "done"), ("pairs", "failed")} <= kinds
    for step, reader in typed:
        assert reader(step.payload).to_json() == step.payload, (step.kind, step.name, step.state)


def test_a_kept_moves_outcome_holds_its_intent_and_both_decisions(tmp_path: Path) -> None:
    t = tuner(FakeRack(lossless_prio=4), tmp_path)
    t.run()
    kept = next(s for s in t.journal.steps(t.run_id) if s.kind == "move" and s.state == "kept")
    found = MoveOutcome.from_json(kept.payload)
    assert found.intent is not None and found.intent.group and found.intent.hosts == ("h01", "h02")
    assert found.decision.all_reduce is not None and found.decision.alltoall is not None
    assert found.decision.all_reduce.runs == len(found.all_reduce) > 0
    assert found.reason.startswith(("all_reduce", "alltoall")) and found.verified is None


def test_an_older_journals_move_reads_with_the_reports_defaults() -> None:
    decision = {"all_reduce": {"reason": "worse x", "p_loss": 0.01}}
    found = MoveOutcome.from_json({"knobs": ["mtu", 3], "decision": decision})
    assert found.intent == MoveIntent(knobs=("mtu", "3"))
    assert found.all_reduce == () and found.pause_frames is None and found.counters is None
    assert found.decision.alltoall is None and found.decision.repair is None
    assert found.decision.all_reduce == MetricDecision(reason="worse x", p_loss=0.01, p=0.01)


@pytest.mark.parametrize(
    ("raw", "cited"),
    [
        ({"reason": "worse -3%", "p_loss": 0.02, "p_gain": 0.9}, 0.02),
        ({"reason": "no gain", "p_loss": 0.02, "p_gain": 0.9}, None),
        ({"reason": "+3%", "p_loss": 0.9, "p_gain": 0.01}, 0.01),
        ({"reason": "+3%", "p_gain": 0.01, "p": 0.04}, 0.04),
        ({"reason": "+3%", "p_gain": 0.01, "p": float("nan")}, None),
    ],
)
def test_a_decision_without_its_p_cites_the_one_its_reason_names(
    raw: dict[str, Any], cited: float | None
) -> None:
    found = MetricDecision.from_json(raw)
    assert found is not None and found.p == cited


def test_payloads_missing_everything_read_as_defaults() -> None:
    assert MoveDecision.from_json(None).to_json() == {}
    assert MoveDecision.from_json({"repair": "ran"}).to_json() == {"repair": "ran"}
    assert BaselinePayload.from_json({"pause_frames": "?"}) == BaselinePayload()
    assert FinalPayload.from_json({"runs": "many", "pair_rounds": None}).runs == 0
    assert FinalPayload.from_json({"state": "?"}).state is None
    assert FactsPayload.from_json({"fabric_type": ""}).fabric_type is None
    assert ResultPayload.from_json({"oracle": [1]}) == ResultPayload()
    assert BaselineFailedPayload.from_json({"errors": ["x"]}).to_json() == {"errors": ["x"]}


def test_the_report_reads_a_move_journaled_without_samples_or_decision(tmp_path: Path) -> None:
    t = tuner(FakeRack(lossless_prio=4), tmp_path)
    t.read_facts()
    seq = t.journal.step(t.run_id, "move", "old move", {"group": "mtu", "hosts": ["h02"]})
    t.journal.finish_step(t.run_id, seq, "rolled_back", {"group": "mtu", "hosts": ["h02"], "pause_frames": 7})
    row = build(t.journal, t.run_id)["tune"]["decisions"][0]
    assert (row["hosts"], row["runs"], row["reason"], row["all_reduce"]) == (["h02"], 0, "", None)
    assert row["pause_frames"] == 7


def test_failure_payloads_read_back_to_the_same_json() -> None:
    failed = {"test": "all_reduce", "rc": 1, "summary": "NCCL WARN", "then": "retrying once"}
    found = FailedRunPayload.from_json(failed)
    assert found.then == "retrying once" and "then" not in found.evidence
    assert found.to_json() == failed
    unavailable = {"error": "timed out", "state": "the baseline", "then": "decisions on nccl-tests alone"}
    assert PairsUnavailablePayload.from_json(unavailable).to_json() == unavailable


def test_a_move_undone_on_resume_keeps_its_intent_as_journaled() -> None:
    intent = MoveIntent(group="mtu", knobs=("nics.mtu",), hosts=("h01",)).to_json()
    undone = undone_on_resume({**intent, "older_key": 1})
    assert undone["older_key"] == 1
    found = MoveOutcome.from_json(undone)
    assert found.intent == MoveIntent.from_json(intent) and found.verified is True
    assert found.reason == "interrupted; undone on resume" and found.all_reduce == ()
