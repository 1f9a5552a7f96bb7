"""Wrong keeps, wrong rollbacks and runs per decision of the tuning loop, against a fixed-5 greedy.

Each decision is made by the real loop code (``Tuner.baseline`` then ``Tuner.judge``: sequential
measurements, both metrics, the guard) over a rack whose true all_reduce bus bandwidth changes by a
known factor when the move is applied and whose alltoall does not change. Every run carries the
fabric model's run-to-run noise (``fabtune.sim.model.noise.factor``: log-normal jitter at the given
coefficient of variation plus its occasional slow runs). The greedy comparator measures 5 runs of
the baseline and 5 of each move and keeps a move whose mean beats the baseline's by the minimum
effect.

Each decision also reads ib_write_bw over rdma_cm (``Tuner``'s pair rounds): 8 pairs and one
incast stage with the same noise at ``--pair-cv``, unchanged by the move in the main table; a
second table gives the collective a clear gain (+10 %) and one pair a true loss, and counts the
moves the pair guard rolls back.

Usage: .venv/bin/python bench/decisions.py [--per-effect 200] [--cv 0.02] [--pair-cv 0.02] [--seed 1]
Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fabtune.ansible import RunOutcome
from fabtune.journal import Journal
from fabtune.sim.model import noise
from fabtune.state import HostState
from fabtune.tune.loop import TuneOptions, Tuner
from fabtune.tune.measure import Batch, Sample
from fabtune.tune.pairs import PairRound
from fabtune.tune.stats import DecisionPolicy

EFFECTS = (-0.10, -0.02, 0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.06, 0.10, 0.20, 1.00)
GREEDY_RUNS = 5
PAIR_LOSSES = (0.0, 0.05, 0.10, 0.15, 0.20, 0.50)
PAIRS = 8


@dataclass
class NoisyRack:
    """A rack measured with the model's noise; ``gain`` is the true effect of the move under test."""

    cv: float
    rng: np.random.Generator
    gain: float = 0.0
    runs: int = 0
    pair_cv: float = 0.02
    pair_loss: float = 0.0  # the true loss of pair p0 under the move
    moved: bool = False
    pair_rounds: int = 0
    ok: RunOutcome = field(init=False)

    def __post_init__(self) -> None:
        self.ok = RunOutcome("successful", 0, {"failures": {}, "dark": {}}, (), Path("/nonexistent"))

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        return {}

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        pass

    def apply(self, desired: Mapping[str, HostState], **_: Any) -> RunOutcome:
        return self.ok

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        return self.ok

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return False  # its state is not shared across threads: confirm before the read back

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        return self.ok

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        self.runs += repetitions
        return Batch(tuple(self._sample() for _ in range(repetitions)), 0)

    def pairs(self) -> PairRound:
        self.pair_rounds += 1
        loss = self.pair_loss if self.moved else 0.0
        found: dict[str, float | None] = {
            f"p{i}": 360.0 * (1 - loss if i == 0 else 1.0) * noise.factor(self.rng, self.pair_cv)
            for i in range(PAIRS)
        }
        return PairRound(found, {"incast": 300.0 * noise.factor(self.rng, self.pair_cv)})

    def _sample(self) -> Sample:
        return Sample(
            100.0 * (1 + self.gain) * noise.factor(self.rng, self.cv), 40.0 * noise.factor(self.rng, self.cv)
        )


@dataclass
class Tally:
    keeps: int = 0
    total: int = 0
    runs: list[int] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    pair_rounds: list[int] = field(default_factory=list)


def kind_of(verdict: str, reason: str) -> str:
    """A verdict's kind: the metric that decided, without its numbers."""
    if verdict == "keep":
        return "keep on " + reason.split(maxsplit=1)[0]
    if reason.startswith("guard: "):
        return "guard: " + reason[len("guard: "):].split(" (", maxsplit=1)[0]
    return reason.split(":", maxsplit=1)[0].split(" (", maxsplit=1)[0]


def loop_decisions(rack: NoisyRack, tuner: Tuner, gain: float, n: int) -> Tally:
    tally = Tally()
    for _ in range(n):
        rack.gain, rack.moved = 0.0, False
        tuner.baseline()
        rack.gain, rack.moved, before, rounds = gain, True, rack.runs, rack.pair_rounds
        judged = tuner.judge()
        tally.total += 1
        tally.keeps += judged.verdict == "keep"
        tally.runs.append(rack.runs - before)
        tally.pair_rounds.append(rack.pair_rounds - rounds)
        kind = kind_of(judged.verdict, judged.reason)
        tally.reasons[kind] = tally.reasons.get(kind, 0) + 1
    return tally


def greedy_decisions(rng: np.random.Generator, cv: float, gain: float, n: int, min_effect: float) -> Tally:
    tally = Tally()
    for _ in range(n):
        base = [100.0 * noise.factor(rng, cv) for _ in range(GREEDY_RUNS)]
        cand = [100.0 * (1 + gain) * noise.factor(rng, cv) for _ in range(GREEDY_RUNS)]
        tally.total += 1
        tally.keeps += statistics.fmean(cand) > statistics.fmean(base) * (1 + min_effect)
        tally.runs.append(GREEDY_RUNS)
    return tally


def rate(hits: int, total: int) -> str:
    return f"{hits / total:.2%} ({hits}/{total})" if total else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-effect", type=int, default=200)
    parser.add_argument("--cv", type=float, default=0.02)
    parser.add_argument("--effects", type=float, nargs="*", default=list(EFFECTS))
    parser.add_argument("--pair-cv", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wrong-rollback-from", type=float, default=0.05,
                        help="true gains from this one up count as moves that must be kept")
    parser.add_argument("--policy", default="{}", help="policy overrides, a dict literal")
    parser.add_argument("--baseline-runs", type=int, default=TuneOptions().baseline_runs)
    args = parser.parse_args()
    options = TuneOptions(DecisionPolicy(**ast.literal_eval(args.policy)), args.baseline_runs)
    policy: DecisionPolicy = options.policy
    rng = np.random.default_rng(args.seed)
    rack = NoisyRack(args.cv, rng, pair_cv=args.pair_cv)
    journal = Journal(Path(tempfile.mkdtemp(prefix="fabtune-decisions-")) / "journal.sqlite")
    tuner = Tuner(rack, journal, journal.open_run("tune", "bench", "-", None), "roce", options=options)
    print(f"policy: {policy}, baseline runs {options.baseline_runs}, cv {args.cv:.1%}, "
          f"{args.per_effect} decisions per effect\n")
    print("| true gain | loop: kept | loop: mean runs | loop: verdicts | greedy-5: kept |")
    print("|---|---|---|---|---|")
    totals = {"loop": Tally(), "greedy": Tally()}
    wrong = {"loop": [0, 0, 0, 0], "greedy": [0, 0, 0, 0]}  # wrong keeps, nulls, wrong rollbacks, gains
    for gain in args.effects:
        ours = loop_decisions(rack, tuner, gain, args.per_effect)
        greedy = greedy_decisions(rng, args.cv, gain, args.per_effect, policy.min_effect)
        why = ", ".join(f"{k} {v}" for k, v in sorted(ours.reasons.items())) or "-"
        print(f"| {gain:+.1%} | {rate(ours.keeps, ours.total)} | {statistics.fmean(ours.runs):.2f} | {why} "
              f"| {rate(greedy.keeps, greedy.total)} |", flush=True)
        for name, t in (("loop", ours), ("greedy", greedy)):
            totals[name].runs += t.runs
            totals[name].pair_rounds += t.pair_rounds
            if gain <= 0:
                wrong[name][0] += t.keeps
                wrong[name][1] += t.total
            if gain >= args.wrong_rollback_from:
                wrong[name][2] += t.total - t.keeps
                wrong[name][3] += t.total
    decisions = len(totals["loop"].runs)
    print(f"\n{decisions} decisions per method; wrong keep = kept with a true gain of 0 or less; "
          f"wrong rollback = rolled back with a true gain of {args.wrong_rollback_from:.0%} or more.\n")
    print("| method | wrong keeps | wrong rollbacks | mean runs per decision "
          "| runs per decision incl. baseline |")
    print("|---|---|---|---|---|")
    for name, base_runs in (("loop", options.baseline_runs), ("greedy", GREEDY_RUNS)):
        mean = statistics.fmean(totals[name].runs)
        wk, nulls, wr, gains = wrong[name]
        print(f"| {name} | {rate(wk, nulls)} | {rate(wr, gains)} | {mean:.2f} | {mean + base_runs:.2f} |")
    rounds = totals["loop"].pair_rounds
    print(f"\nib_write_bw pair rounds per decision (loop): {statistics.fmean(rounds):.2f} "
          f"(at most {max(rounds)}), plus 2 per baseline (the best-of-two reference)")
    pair_table(rack, tuner, args.per_effect)


def pair_table(rack: NoisyRack, tuner: Tuner, n: int) -> None:
    """A move with a clear collective gain (+10 %) that costs one of the 8 pairs ``loss``."""
    print("\n| true loss of one pair | rolled back | verdicts | pair rounds per decision |")
    print("|---|---|---|---|")
    for loss in PAIR_LOSSES:
        rack.pair_loss = loss
        t = loop_decisions(rack, tuner, 0.10, n)
        why = ", ".join(f"{k} {v}" for k, v in sorted(t.reasons.items())) or "-"
        rounds = statistics.fmean(t.pair_rounds)
        print(f"| {loss:.0%} | {rate(t.total - t.keeps, t.total)} | {why} | {rounds:.2f} |", flush=True)
    rack.pair_loss = 0.0


if __name__ == "__main__":
    main()
