"""How close `fabtune tune` gets to the model's best configuration, per misconfiguration.

For each scenario: build a testbed rack misconfigured in one way the model knows, run the real
tuning loop on it (Ansible over SSH, emulated tools, the fabric model behind them), and compare
the tuned rack's noise-free all_reduce bus bandwidth with the oracle's best reachable one. Each
row also gives what the ib_write_bw (rdma_cm) rounds of the decisions cost and saw: the rounds
run, and the tuned state's median and worst pair against the baseline's (the covering round each
state last measured, pair by pair, from the journal's ``pairs baseline`` and ``pairs final``).
Usage (root): .venv/bin/python bench/tune_scenarios.py [--only NAME ...]
Prints a Markdown table for docs/benchmarks.md on stdout; each run's moves (hosts, outcome,
reason) and its run id on stderr. Uses the testbed name "tsc" and subnet 10.220.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.testbed import build, layout
from fabtune.testbed.oracle import testbed_oracle
from fabtune.testbed.spec import build_spec
from fabtune.tune import run as tune_run
from fabtune.tune.loop import MoveRecord, TuneResult

GOOD = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [0, 0, 0, 1, 0, 0, 0, 0],
        "ecn_rp": [0, 0, 0, 1, 0, 0, 0, 0], "roce_tos": 106, "mtu": 4200}
SWITCH = {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"}
SMALL = {"hosts": 2, "nics_per_host": 2, "gpus_per_host": 2}
# 3 hosts of 1 NIC: the smallest rack with an incast stage (a 2-host rack has no congestion in its
# pair round, so a wrong rdma_cm ToS cannot show there) and with a host after the odd one.
THREE = {"hosts": 3, "nics_per_host": 1, "gpus_per_host": 1}
NCCL_TC = {"NCCL_IB_TC": "106"}  # NCCL's own traffic class already right: the collectives see no fault

# Most informative first: a partial run (--only, or stopped) keeps the new cases.
SCENARIOS: dict[str, dict[str, Any]] = {
    "factory-defaults": {**SMALL, "initial": {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500}},
    "tos-only": {**THREE, "initial": {**GOOD, "roce_tos": 0}, "nccl_conf": NCCL_TC},
    "h02-pfc-off": {**THREE, "initial": GOOD, "nccl_conf": NCCL_TC,
                    "overrides": {"h02": {"initial": {"pfc": [0] * 8}}}},
    "one-qp-at-scale": {"hosts": 8, "nics_per_host": 1, "gpus_per_host": 1, "initial": GOOD,
                        "switch": {**SWITCH, "nodes_per_leaf": 2}},
    "ib-minhop-no-ar": {"hosts": 8, "nics_per_host": 1, "gpus_per_host": 1, "fabric": "ib",
                        "sm": {"routing_engine": "minhop", "adaptive_routing": False},
                        "switch": {"nodes_per_leaf": 2}},
    "pfc-off": {**SMALL, "initial": {**GOOD, "pfc": [0] * 8}},
    "pfc-wrong-priority": {**SMALL, "initial": {**GOOD, "pfc": [0, 0, 0, 0, 1, 0, 0, 0]}},
    "trust-pcp-untagged": {**SMALL, "initial": {**GOOD, "trust": "pcp"}},
    "ecn-off": {**SMALL, "initial": {**GOOD, "ecn_np": [0] * 8, "ecn_rp": [0] * 8}},
    "roce-mtu-1024": {**SMALL, "initial": {**GOOD, "mtu": 1500}},
    "tos-mismatch": {**SMALL, "initial": {**GOOD, "roce_tos": 0}},
}

GREEDY_RUNS = 5
HEADER = ("| scenario | kept moves (hosts where not all; decided on) | rolled back (verified) "
          "| tuned busbw (GB/s) | oracle best (GB/s) | share of best | wall time (s) | benchmark runs "
          "| greedy-5, whole plan | greedy-5, same moves | ib_write_bw rounds | median pair, tuned/baseline "
          "| worst pair, tuned/baseline |")


@dataclass(frozen=True)
class Row:
    name: str
    kept: str
    rolled: int
    tuned: float
    best: float
    elapsed: float
    runs: str
    pair_rounds: int | None
    median_pair: str
    worst_pair: str

    def markdown(self) -> str:
        rounds = "-" if self.pair_rounds is None else str(self.pair_rounds)
        return (f"| {self.name} | {self.kept} | {self.rolled} | {self.tuned:.1f} | {self.best:.1f} "
                f"| {self.tuned / self.best:.1%} | {self.elapsed:.0f} | {self.runs} | {rounds} "
                f"| {self.median_pair} | {self.worst_pair} |")


def decided_on(reason: str) -> str:
    """The metric a kept move's journaled reason names first."""
    for prefix, metric in (("all_reduce", "all_reduce"), ("alltoall", "alltoall"),
                           ("ib_write_bw (rdma_cm) incast", "ib_write_bw incast"),
                           ("ib_write_bw (rdma_cm) median", "ib_write_bw median pair")):
        if reason.startswith(prefix):
            return metric
    return reason.split(" ", maxsplit=1)[0] or "?"


def kept_moves(moves: Sequence[MoveRecord], hosts: int) -> str:
    kept = [f"{m.name} ({'' if len(m.hosts) == hosts else ', '.join(m.hosts) + '; '}{decided_on(m.reason)})"
            for m in moves if m.outcome == "kept"]
    return ", ".join(kept) or "none"


def _round(payload: Mapping[str, Any] | None) -> dict[str, float]:
    """A journaled pair matrix step's pairs, by label (``client->server device``), the failed left out."""
    found = (payload or {}).get("pairs") or []
    return {f"{p['client']}->{p['server']} {p['device']}": p["gbps"] for p in found if p.get("gbps")}


def pair_ratios(steps: Sequence[Any]) -> tuple[int | None, str, str]:
    """The run's ib_write_bw rounds, and the tuned state's median and worst pair against the baseline's."""
    named = {s.name: s.payload for s in steps}
    rounds = (named.get("final") or {}).get("pair_rounds")
    before, after = _round(named.get("pairs baseline")), _round(named.get("pairs final"))
    ratios = {k: after[k] / before[k] for k in before if k in after}
    if not ratios:
        return rounds, "-", "-"
    worst = min(ratios, key=lambda k: ratios[k])
    return rounds, f"x{statistics.median(ratios.values()):.3f}", f"x{ratios[worst]:.3f} ({worst})"


def describe(name: str, result: TuneResult) -> None:
    """The run id and each move, for the text beside the table (stderr)."""
    print(f"## {name}: run {result.run_id}; slow pairs: {result.slow_pairs or 'none'}", file=sys.stderr)
    for m in result.moves:
        print(f"  {m.outcome:11} {m.name} on {', '.join(m.hosts)}: {m.reason}", file=sys.stderr)
    sys.stderr.flush()


def run(name: str, doc: dict[str, Any]) -> Row:
    spec = build_spec({"name": "tsc", "subnet_base": "10.220", "seed": 3, "switch": SWITCH, **doc})
    inventory = layout.testbed_dir(spec.name) / "inventory.yml"
    build.up(spec)
    try:
        start = time.monotonic()
        result, _report = tune_run.tune(inventory, {}, oracle=testbed_oracle)
        elapsed = time.monotonic() - start
        oracle = testbed_oracle(read_inventory(inventory))
    finally:
        build.down(spec.name)
    assert oracle is not None
    describe(name, result)
    journal = Journal()
    try:
        rounds, median, worst = pair_ratios(journal.steps(result.run_id))
    finally:
        journal.close()
    rolled = sum(m.outcome == "rolled_back" for m in result.moves)
    whole_plan = GREEDY_RUNS * (1 + sum(len(group) for group in result.planned))
    same_moves = GREEDY_RUNS * (1 + len(result.moves))
    runs = (f"{result.runs} | {whole_plan} ({result.runs / whole_plan:.0%}) "
            f"| {same_moves} ({result.runs / same_moves:.0%})")
    return Row(name, kept_moves(result.moves, spec_hosts(doc)), rolled, oracle["tuned_busbw"],
               oracle["best_busbw"], elapsed, runs, rounds, median, worst)


def spec_hosts(doc: Mapping[str, Any]) -> int:
    return int(doc.get("hosts", 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    args = parser.parse_args()
    os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-"))
    print(HEADER)
    print("|---" * HEADER.count(" | ") + "|---|")
    for name in args.only:
        try:
            row = run(name, SCENARIOS[name])
        except Exception as err:  # one scenario's failure is reported, the others still run
            print(f"| {name} | failed: {type(err).__name__}: {str(err)[:300]} |", flush=True)
            continue
        print(row.markdown(), flush=True)


if __name__ == "__main__":
    main()
