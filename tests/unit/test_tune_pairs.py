"""ib_write_bw over rdma_cm in every decision: a broken pair vetoes, a clear pair gain keeps."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fabtune.commands.tune import print_result
from fabtune.errors import PlaybookFailed
from fabtune.journal import Journal
from fabtune.knobs import Change, LosslessClass, lossless_change
from fabtune.perf.pairs import PairResult
from fabtune.report import render, render_markdown, validate
from fabtune.report.build import build
from fabtune.tune.loop import TuneOptions, Tuner, touches_rdma_cm
from fabtune.tune.pairs import PairRound, best_of, compare, confirm, slow_pairs
from tests.unit.test_tune_loop import FACTORY, FakeRack

TOS = 106  # DSCP 26 (priority 3) with ECT(0)
TUNED = {**FACTORY, **lossless_change(3).nic}
PAIR, OTHER = "h02->h01 mlx5_0", "h04->h03 mlx5_0"
INCAST = "3:1 into h01 mlx5_0"


class PairRack(FakeRack):
    """Four hosts whose collectives follow NCCL_IB_TC and MTU, and whose ib_write_bw (rdma_cm)
    follows the rdma_cm ToS (the incast stage collapses in a lossy class) and ``pair_gbps``."""

    def __init__(self, factory: Mapping[str, Any] = TUNED, **kw: Any) -> None:
        super().__init__(hosts=("h01", "h02", "h03", "h04"), factory=factory, **kw)
        for state in self.state.values():
            state["nccl"] = {"NCCL_IB_TC": str(TOS)}
        self.rounds = 0
        self.dips: list[int] = []  # rounds (1-based) in which PAIR dips once (an ECMP collision)

    def _busbw(self) -> tuple[float, float]:
        nic = self.state["h01"]["nics"]["eth2"]
        mtu = 1.06 if nic.get("mtu") == 4200 else 1.0
        return 100 * mtu, 100.0

    def pair_gbps(self) -> dict[str, float]:
        return {PAIR: 360.0, OTHER: 360.0}

    def pairs(self) -> PairRound | None:
        self.rounds += 1
        tos = self.state["h01"]["nics"]["eth2"].get("roce_tos")
        found = self.pair_gbps()
        if self.rounds in self.dips:
            found[PAIR] *= 0.6
        noise = self.rng.normal(0, 0.01, len(found) + 1)
        pairs = {k: v * float(1 + n) for (k, v), n in zip(found.items(), noise, strict=False)}
        incast = {INCAST: (340.0 if tos == TOS else 75.0) * float(1 + noise[-1])}
        return PairRound(pairs, incast)


class MtuBreaksAPair(PairRack):
    """MTU 4200 lifts the collectives 6 %, but h04's switch port drops the big frames: h04->h03 falls."""

    def pair_gbps(self) -> dict[str, float]:
        found = super().pair_gbps()
        if self.state["h04"]["nics"]["eth2"].get("mtu") == 4200:
            found[OTHER] = 90.0
        return found


class OneSlowPair(PairRack):
    """A rack whose only fault is one slow pair (a bad cable between h04 and h03)."""

    def pair_gbps(self) -> dict[str, float]:
        return {**super().pair_gbps(), OTHER: 150.0}


class OnlyNcclIsOff(PairRack):
    """NICs already in the lossless class (trust, PFC, ECN, the rdma_cm ToS): only NCCL_IB_TC is unset,
    so NCCL's traffic leaves in priority 0 and the collectives are slow. PAIR dips in the rounds
    after the baseline (``dips``): what a pair round would see of an ECMP collision that moved."""

    def __init__(self) -> None:
        super().__init__()
        for state in self.state.values():
            state["nccl"] = {}

    def _busbw(self) -> tuple[float, float]:
        lossless = self.state["h01"].get("nccl", {}).get("NCCL_IB_TC") == str(TOS)
        return (100.0, 100.0) if lossless else (60.0, 60.0)


def run(rack: PairRack, tmp_path: Path, skip: tuple[str, ...]) -> tuple[Tuner, Any]:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    events: list[str] = []
    options = TuneOptions(skip_groups=skip, lossless=LosslessClass(3, 26))
    tuner = Tuner(rack, journal, run_id, "roce", options=options,
                  on_event=lambda kind, message, data: events.append(f"{kind}: {message}"))
    result = tuner.run()
    tuner.emit = lambda kind, message, data: None
    return tuner, (result, events)


def test_a_tos_move_that_only_improves_the_pairs_is_kept(tmp_path: Path) -> None:
    rack = PairRack(factory={**TUNED, "roce_tos": 0})  # NCCL_IB_TC is right: nccl-tests see no fault
    tuner, (result, _) = run(rack, tmp_path, ("mtu", "qps", "gdr"))
    [move] = result.moves
    assert move.outcome == "kept", move.reason
    assert move.reason.startswith(f"ib_write_bw (rdma_cm) incast {INCAST} x4.")
    assert "all_reduce" in move.reason and "not decisive alone" in move.reason
    assert rack.state["h03"]["nics"]["eth2"]["roce_tos"] == TOS
    assert move.decision.pairs["verdict"] == "better"
    # The keep's two rounds are the next reference: 2 for the baseline, the move's and its confirmation.
    assert tuner.pair_reference is not None and tuner.pair_reference.incast[INCAST] > 300
    assert rack.rounds == 4


def test_a_move_that_breaks_one_pair_is_rolled_back_naming_it(tmp_path: Path) -> None:
    rack = MtuBreaksAPair()
    tuner, (result, _) = run(rack, tmp_path, ("lossless", "qps", "gdr"))
    [move] = result.moves
    assert move.name == "MTU 4200" and move.outcome == "rolled_back"
    assert move.reason.startswith(f"guard: ib_write_bw (rdma_cm) pair {OTHER} x0.2")
    assert "over the 10% guard" in move.reason
    assert move.decision.all_reduce.verdict == "keep"  # the collective alone would have kept it
    assert rack.state["h04"]["nics"]["eth2"]["mtu"] == 1500
    moves = [s for s in tuner.journal.steps(tuner.run_id) if s.kind == "move"]
    assert [s.state for s in moves] == ["rolled_back"]


def test_a_move_that_changes_no_nic_is_not_judged_on_the_pairs(tmp_path: Path) -> None:
    """Found on the 8-host one-qp-at-scale testbed rack: the lossless move (+1274 % all_reduce) was
    rolled back for one pair at x0.68, though on those NICs it changed nothing but NCCL_IB_TC."""
    rack = OnlyNcclIsOff()
    rack.dips = [3, 4, 5, 6]  # every round after the baseline's two
    _, (result, _) = run(rack, tmp_path, ("mtu", "qps", "gdr"))
    [move] = result.moves
    assert move.name.startswith("lossless priority 3") and move.outcome == "kept", move.reason
    assert move.decision.pairs is None  # no pair round judged a move that changed no NIC
    assert rack.state["h02"]["nccl"]["NCCL_IB_TC"] == str(TOS)
    assert touches_rdma_cm(lossless_change(3), {"h01": ["eth2"]})
    assert not touches_rdma_cm(lossless_change(3), {"h01": [], "h02": []})


def test_a_dip_in_one_round_only_is_not_a_broken_pair(tmp_path: Path) -> None:
    rack = PairRack()
    rack.dips = [3]  # the move's first round (after the baseline's 2): the pair dips, the confirming one not
    _, (result, _) = run(rack, tmp_path, ("lossless", "qps", "gdr"))
    [move] = result.moves
    assert move.outcome == "kept" and move.reason.startswith("all_reduce"), move.reason
    assert rack.rounds == 4


def test_the_pair_reference_is_the_best_of_two_rounds(tmp_path: Path) -> None:
    """A slow run in the reference would make every later move look better: the best of two."""
    rack = PairRack()
    rack.dips = [1]
    tuner, (result, _) = run(rack, tmp_path, ("lossless", "mtu", "qps", "gdr"))
    assert rack.rounds == 2 and result.slow_pairs == []
    assert tuner.pair_reference is not None and tuner.pair_reference.pairs[PAIR] > 340
    assert best_of([PairRound({"a": None}, {}, {"a": "timeout"}), PairRound({"a": 5.0})]) == PairRound(
        {"a": 5.0}, {})


def test_a_slow_pair_is_reported_by_name(tmp_path: Path) -> None:
    tuner, (result, events) = run(OneSlowPair(), tmp_path, ("lossless", "mtu", "qps", "gdr"))
    assert result.moves == [] and len(result.slow_pairs) == 1
    shape = rf"{OTHER}: 1[45]\d\.\d Gb/s, x0\.4\d of the median of the other pairs \(3[56]\d\.\d Gb/s\)"
    assert re.fullmatch(shape, result.slow_pairs[0])
    assert any(e.startswith(f"pairs: slow pair: {OTHER}: ") for e in events)
    baseline = next(s for s in tuner.journal.steps(tuner.run_id) if s.name == "baseline")
    assert [line.split(":")[0] for line in baseline.payload["slow_pairs"]] == [OTHER]


def test_compare_reads_the_worst_pair_the_median_and_the_incast() -> None:
    ref = PairRound({"a": 100.0, "b": 100.0, "c": 100.0}, {"s": 100.0})

    def verdict(found: PairRound) -> str:
        return compare(ref, found, 0.1, 0.1).verdict

    assert verdict(PairRound({"a": 101.0, "b": 99.0, "c": 100.0}, {"s": 98.0})) == "same"
    failed = PairRound({"a": 100.0, "b": None, "c": 100.0}, {"s": 100.0}, {"b": "timeout"})
    broke = compare(ref, failed, 0.1, 0.1)
    assert (broke.verdict, broke.worst, broke.worst_ratio) == ("worse", "b", 0.0)
    assert "failed Gb/s: timeout" in broke.reason
    assert verdict(PairRound({"a": 100.0, "b": 100.0, "c": 100.0}, {"s": 80.0})) == "worse"
    assert verdict(PairRound({"a": 120.0, "b": 120.0, "c": 95.0}, {})) == "better"
    once = compare(ref, PairRound({"a": 50.0, "b": 100.0, "c": 100.0}), 0.1, 0.1)
    assert confirm(once, ref, ref, 0.1, 0.1).verdict == "same"
    # A pair broken on both rounds is named, though a transient dip was the first round's worst.
    first = compare(ref, PairRound({"a": 80.0, "b": 40.0, "c": 100.0}), 0.1, 0.1)
    assert (first.metric, first.broken) == ("pair b", ("pair b", "pair a"))
    both = confirm(first, ref, PairRound({"a": 79.0, "b": 100.0, "c": 100.0}), 0.1, 0.1)
    assert (both.verdict, both.metric) == ("worse", "pair a")
    assert both.reason.startswith("ib_write_bw (rdma_cm) pair a x0.79 (100.0 -> 79.0 Gb/s), over the 10%")
    gained = compare(ref, PairRound({"a": 100.0, "b": 100.0, "c": 100.0}, {"s": 300.0}), 0.1, 0.1)
    assert confirm(gained, ref, PairRound(ref.pairs, {"s": 101.0}), 0.1, 0.1).verdict == "same"
    assert slow_pairs(PairRound({"a": 100.0, "b": 100.0, "c": 60.0})) == [
        "c: 60.0 Gb/s, x0.60 of the median of the other pairs (100.0 Gb/s)"]


def test_the_report_names_the_slow_pair(tmp_path: Path) -> None:
    tuner, _ = run(OneSlowPair(), tmp_path, ("lossless", "mtu", "qps", "gdr"))
    tuner.journal.close_run(tuner.run_id, "done", {})
    doc = build(tuner.journal, tuner.run_id)
    validate(doc)
    warned = [c for c in doc["checks"] if c["check"] == "ib_write_bw pair (rdma_cm)"]
    assert [(c["phase"], c["host"], c["verdict"]) for c in warned] == [
        ("baseline", "h04->h03", "warn"), ("tuned state", "h04->h03", "warn")]
    assert f"- baseline: slow pair: {OTHER}: " in render_markdown(doc)


def test_tune_prints_the_slow_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, (result, _) = run(OneSlowPair(), tmp_path, ("lossless", "mtu", "qps", "gdr"))
    print_result(result, tmp_path / "report.json")
    assert f"slow ib_write_bw pair (rdma_cm): {OTHER}: " in capsys.readouterr().out


class NoRdmaCm(PairRack):
    """ib_write_bw over rdma_cm cannot run on this rack at all (its servers never listen)."""

    def pairs(self) -> PairRound | None:
        self.rounds += 1
        raise PlaybookFailed("benchmark: h01: Wait for servers to listen: timed out")


class MtuKillsRdmaCm(PairRack):
    """Under MTU 4200 the pair round's playbook itself fails (no server comes up)."""

    def pairs(self) -> PairRound | None:
        if self.state["h01"]["nics"]["eth2"].get("mtu") == 4200:
            self.rounds += 1
            raise PlaybookFailed("benchmark: h02: Run the clients: rc 1")
        return super().pairs()


def test_a_rack_where_rdma_cm_cannot_run_is_tuned_on_nccl_tests_and_says_so(tmp_path: Path) -> None:
    rack = NoRdmaCm()
    tuner, (result, events) = run(rack, tmp_path, ("lossless", "qps", "gdr"))
    [move] = result.moves
    assert move.outcome == "kept" and move.reason.startswith("all_reduce"), move.reason
    assert rack.rounds == 1 and tuner.pair_reference is None  # tried once, then left alone
    assert any("ib_write_bw over rdma_cm could not run in the baseline" in e for e in events), events
    failed = [s for s in tuner.journal.steps(tuner.run_id) if s.kind == "benchmark"]
    assert [s.state for s in failed] == ["failed"] and "Wait for servers" in failed[0].payload["error"]


def test_a_move_under_which_the_pair_round_cannot_run_is_rolled_back(tmp_path: Path) -> None:
    rack = MtuKillsRdmaCm()
    _, (result, _) = run(rack, tmp_path, ("lossless", "qps", "gdr"))
    [move] = result.moves
    assert move.name == "MTU 4200" and move.outcome == "rolled_back", move.reason
    assert move.reason.startswith("guard: ib_write_bw (rdma_cm)") and "x0.00" in move.reason, move.reason
    assert rack.state["h01"]["nics"]["eth2"]["mtu"] == 1500


def test_a_move_of_nccl_keys_only_gets_no_pair_round(tmp_path: Path) -> None:
    """perftest reads no nccl.conf: a QPs-per-connection move is decided on the collectives alone."""
    rack = PairRack()
    _, (result, _) = run(rack, tmp_path, ("lossless", "mtu", "gdr"))
    assert [m.group for m in result.moves] == ["qps"]
    assert rack.rounds == 2  # the baseline's reference only
    assert result.moves[0].decision.pairs is None
    assert not touches_rdma_cm(Change(nccl={"NCCL_IB_QPS_PER_CONNECTION": "4"}))
    assert touches_rdma_cm(Change(nic={"mtu": 4200}))
    assert touches_rdma_cm(Change(sm={"routing_engine": "ftree"}))


class MatrixRack(PairRack):
    """A PairRack whose rounds carry their pair runs (as the testbed's do): one per pair, tagged."""

    def pairs(self) -> PairRound | None:
        found = super().pairs()
        assert found is not None
        runs = tuple(PairResult(label.split("->")[1].split()[0], label.split("->")[0], 0, "mlx5_0",
                                gbps, 400.0, None, {"round": {"n": self.rounds}})
                     for label, gbps in found.pairs.items())
        return dataclasses.replace(found, results=runs)


def test_the_round_matrix_is_the_decisions_round_of_that_state(tmp_path: Path) -> None:
    """pair_matrix round: the covering round the decisions measured in the state is the heatmap,
    not a second run of the same pairs; the final matrix is the kept state's last round."""
    rack = MatrixRack(factory={**TUNED, "roce_tos": 0})
    tuner, (result, _) = run(rack, tmp_path, ("mtu", "qps", "gdr"))
    assert result.moves[0].outcome == "kept"
    assert rack.pair_rounds == 0  # the backend's separate matrix never ran
    steps = {s.name: s for s in tuner.journal.steps(tuner.run_id) if s.kind == "pairs"}
    rounds_of = {n: {p["counters"]["round"]["n"] for p in s.payload["pairs"]} for n, s in steps.items()}
    assert rounds_of == {"pairs baseline": {2}, "pairs final": {rack.rounds}}
    assert steps["pairs final"].payload["measured"] == "the decision round (rdma_cm)"
    assert len(steps["pairs final"].payload["pairs"]) == 2


class OneSlowPort(PairRack):
    """h03's port trained at 200 Gb/s (a bad cable): its pair runs at half, its ceiling is half,
    and the rounds carry their pair runs with both ends' NICs (as the testbed's do)."""

    def pair_gbps(self) -> dict[str, float]:
        return {**super().pair_gbps(), OTHER: 180.0}

    def pairs(self) -> PairRound | None:
        found = super().pairs()
        assert found is not None
        runs = tuple(PairResult(label.split("->")[1].split()[0], label.split("->")[0], 0, "mlx5_0", gbps,
                                196.0 if label == OTHER else 392.1, client_device="mlx5_0")
                     for label, gbps in found.pairs.items())
        return dataclasses.replace(found, results=runs)


def test_a_slow_port_is_named_by_both_ends_in_the_loop_and_the_report(tmp_path: Path) -> None:
    tuner, (result, events) = run(OneSlowPort(), tmp_path, ("lossless", "mtu", "qps", "gdr"))
    ends = "h04 mlx5_0 -> h03 mlx5_0"
    shape = (rf"{ends}: 1[78]\d\.\d Gb/s, x0\.[45]\d of the median of the other pairs \(3[56]\d\.\d Gb/s\); "
             r"its link's ceiling is 196\.0 Gb/s against 392\.1: a port below the rack's speed")
    assert result.moves == [] and len(result.slow_pairs) == 1
    assert re.fullmatch(shape, result.slow_pairs[0]), result.slow_pairs
    assert any(e.startswith(f"pairs: slow pair: {ends}: ") for e in events)
    tuner.journal.close_run(tuner.run_id, "done", {})
    doc = build(tuner.journal, tuner.run_id)
    validate(doc)
    warned = [c for c in doc["checks"] if c["check"] == "ib_write_bw pair (rdma_cm)"]
    assert [(c["phase"], c["host"], c["verdict"]) for c in warned] == [
        ("baseline", "h04->h03", "warn"), ("tuned state", "h04->h03", "warn")]
    assert f"- baseline: slow pair: {ends}: " in render_markdown(doc)


class SlowPortOnTwoPairs(PairRack):
    """h03's port trained at 200 Gb/s and in two pairs of the round (as the odd-rack round pairs one
    host twice): both its pairs at half, with half the ceiling; h02 and h04 have a fine pair each."""

    THROUGH = "h03->h02 mlx5_0"

    def pair_gbps(self) -> dict[str, float]:
        return {**super().pair_gbps(), OTHER: 180.0, self.THROUGH: 180.0, "h04->h01 mlx5_0": 360.0}

    def pairs(self) -> PairRound | None:
        found = super().pairs()
        assert found is not None
        runs = tuple(PairResult(label.split("->")[1].split()[0], label.split("->")[0], 0, "mlx5_0", gbps,
                                196.0 if "h03" in label else 392.1, client_device="mlx5_0")
                     for label, gbps in found.pairs.items())
        return dataclasses.replace(found, results=runs)


def test_a_slow_port_on_two_pairs_is_named_in_the_loop_the_report_and_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tuner, (result, events) = run(SlowPortOnTwoPairs(), tmp_path, ("lossless", "mtu", "qps", "gdr"))
    ends = ["h03 mlx5_0 -> h02 mlx5_0", "h04 mlx5_0 -> h03 mlx5_0"]
    assert [line.split(":")[0] for line in result.slow_pairs] == ends
    [port] = result.slow_ports
    assert (port["port"], port["host"], port["pairs"]) == ("h03 mlx5_0", "h03", result.slow_pairs)
    shape = (r"port h03 mlx5_0 is slow: 2 of its 2 pairs under x0\.80 of the median of the other pairs; "
             r"its pairs' median 1[78]\d\.\d Gb/s against 3[56]\d\.\d for the pairs not through it "
             r"\(x0\.[45]\d\); its link's ceiling is 196\.0 Gb/s against 392\.1: "
             r"a port below the rack's speed")
    assert re.fullmatch(shape, port["summary"]), port["summary"]
    assert any(e.startswith("pairs: port h03 mlx5_0 is slow: 2 of its 2 pairs") for e in events)
    assert any(e.startswith("pairs: port h03 mlx5_0 is slow in the tuned state: ") for e in events)
    final = next(s for s in tuner.journal.steps(tuner.run_id) if s.name == "final")
    assert final.payload["slow_ports"] == [port]
    tuner.journal.close_run(tuner.run_id, "done", {})
    doc = build(tuner.journal, tuner.run_id)
    validate(doc)
    warned = [(c["phase"], c["check"], c["host"])
              for c in doc["checks"] if c["check"].startswith("ib_write_bw")]
    assert warned == [("baseline", "ib_write_bw port (rdma_cm)", "h03"),
                      ("tuned state", "ib_write_bw port (rdma_cm)", "h03")]  # its pairs under it, not apart
    markdown = render_markdown(doc).splitlines()
    at = markdown.index(f"- baseline: {port['summary']}")
    assert [line.split(":")[0] for line in markdown[at + 1:at + 3]] == ["  - slow pair"] * 2
    assert "h04 mlx5_0 -&gt; h03 mlx5_0: 1" in render(doc, "html")
    print_result(result, tmp_path / "report.json")
    out = capsys.readouterr().out.splitlines()
    at = out.index(f"ib_write_bw (rdma_cm): {port['summary']}")
    assert out[at + 1:at + 3] == [f"  slow pair: {line}" for line in result.slow_pairs]
    assert not any(line.startswith("slow ib_write_bw pair") for line in out)


def test_a_pair_that_failed_before_and_runs_now_is_a_gain() -> None:
    before = PairRound({PAIR: None, OTHER: 360.0}, {INCAST: None})
    after = PairRound({PAIR: 358.0, OTHER: 361.0}, {INCAST: 340.0})
    found = compare(before, after, 0.10, 0.10)
    assert (found.verdict, found.metric) == ("better", f"pair {PAIR}")
    assert found.reason == (
        f"ib_write_bw (rdma_cm) pair {PAIR} failed before and runs now (358.0 Gb/s); 2 revived")
    assert confirm(found, before, after, 0.10, 0.10).verdict == "better"
    still = PairRound({PAIR: None, OTHER: 360.0}, {INCAST: None})
    assert compare(before, still, 0.10, 0.10).verdict == "same"


def test_a_gain_seen_on_both_rounds_stands_when_the_second_breaks_a_pair_once() -> None:
    before = PairRound({PAIR: 360.0, OTHER: 360.0}, {INCAST: 240.0})
    first = compare(before, PairRound({PAIR: 360.0, OTHER: 361.0}, {INCAST: 390.0}), 0.10, 0.10)
    assert first.verdict == "better"
    dipped = PairRound({PAIR: 360.0, OTHER: 280.0}, {INCAST: 389.0})  # one slow run of OTHER
    held = confirm(first, before, dipped, 0.10, 0.10)
    assert held.verdict == "better" and held.metric == f"incast {INCAST}"
    assert f"pair {OTHER} x0.78" in held.reason and "on that round only" in held.reason
    gone = PairRound({PAIR: 360.0, OTHER: 280.0}, {INCAST: 250.0})  # the gain was not seen again
    assert confirm(first, before, gone, 0.10, 0.10).verdict == "same"


class LateClients(PairRack):
    """h04's clients reach their host after the round's common start (Ansible handed it the task
    last on a loaded controller): every round says how late."""

    def pairs(self) -> PairRound | None:
        found = super().pairs()
        assert found is not None
        return dataclasses.replace(found, late={"h02": 0.1, "h04": 0.9})


def test_a_round_whose_clients_started_late_is_warned_about(tmp_path: Path) -> None:
    _, (_, events) = run(LateClients(), tmp_path, ("mtu", "qps", "gdr"))
    warned = [e for e in events if e.startswith("warning: ib_write_bw round: clients started after")]
    assert warned and all("(h04 0.9 s, of a 2 s run)" in e for e in warned), events
    _, (_, quiet) = run(PairRack(), tmp_path / "on-time", ("mtu", "qps", "gdr"))
    assert not [e for e in quiet if e.startswith("warning: ib_write_bw round")]


class RecordingRack(PairRack):
    """Records the pair rounds each armed apply asks to run with its first batch."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.rounds_with_apply: list[int] = []

    def apply(self, desired: Any, *, run_id: str | None = None, pairs_after: int = 0, **kw: Any) -> Any:
        if run_id is not None:
            self.rounds_with_apply.append(pairs_after)
        return super().apply(desired, run_id=run_id, **kw)


@pytest.mark.parametrize(("deadline_s", "asked"), [(None, [1, 0]), (300.0, [1, 0]), (20.0, [0, 0])])
def test_a_moves_round_is_asked_for_with_its_apply_where_the_deadline_holds_both(
    tmp_path: Path, deadline_s: float | None, asked: list[int]
) -> None:
    """The MTU move changes the NICs: its round may run right after its first batch, in the apply's
    Ansible run, unless the revert deadline (20 s here) might not outlast the batch and the round
    with ``_hold_for``'s 30 s margin. The QPs move changes no NIC: it is not judged on the pairs."""
    rack = RecordingRack()
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    options = TuneOptions(skip_groups=("lossless", "gdr"), lossless=LosslessClass(3, 26))
    tuner = Tuner(rack, journal, run_id, "roce", options=options, revert_deadline_s=deadline_s)
    result = tuner.run()
    assert [m.name for m in result.moves][:2] == ["MTU 4200", "4 QPs per connection"]
    assert rack.rounds_with_apply[:2] == asked
    # the MTU move's judgement took one round either way (its reference: the baseline's two)
    mtu = result.moves[0]
    assert mtu.outcome == "kept" and mtu.decision.pairs is not None
