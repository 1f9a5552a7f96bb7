"""How close `fabtune tune` gets to the model's best configuration, per misconfiguration.

For each scenario: build a testbed rack misconfigured in one way the model knows, run the real
tuning loop on it (Ansible over SSH, emulated tools, the fabric model behind them), and compare
the tuned rack's noise-free all_reduce bus bandwidth with the oracle's best reachable one.
Usage (root): .venv/bin/python bench/tune_scenarios.py [--only NAME ...]
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from fabtune.testbed import build, layout
from fabtune.testbed.oracle import testbed_oracle
from fabtune.testbed.spec import build_spec
from fabtune.tune import run as tune_run

GOOD = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [0, 0, 0, 1, 0, 0, 0, 0],
        "ecn_rp": [0, 0, 0, 1, 0, 0, 0, 0], "roce_tos": 106, "mtu": 4200}
SWITCH = {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"}
SMALL = {"hosts": 2, "nics_per_host": 2, "gpus_per_host": 2}

SCENARIOS: dict[str, dict[str, Any]] = {
    "pfc-off": {**SMALL, "initial": {**GOOD, "pfc": [0] * 8}},
    "pfc-wrong-priority": {**SMALL, "initial": {**GOOD, "pfc": [0, 0, 0, 0, 1, 0, 0, 0]}},
    "trust-pcp-untagged": {**SMALL, "initial": {**GOOD, "trust": "pcp"}},
    "ecn-off": {**SMALL, "initial": {**GOOD, "ecn_np": [0] * 8, "ecn_rp": [0] * 8}},
    "roce-mtu-1024": {**SMALL, "initial": {**GOOD, "mtu": 1500}},
    "tos-mismatch": {**SMALL, "initial": {**GOOD, "roce_tos": 0}},
    "factory-defaults": {**SMALL, "initial": {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500}},
    "one-qp-at-scale": {"hosts": 8, "nics_per_host": 1, "gpus_per_host": 1, "initial": GOOD,
                        "switch": {**SWITCH, "nodes_per_leaf": 2}},
    "ib-minhop-no-ar": {"hosts": 8, "nics_per_host": 1, "gpus_per_host": 1, "fabric": "ib",
                        "sm": {"routing_engine": "minhop", "adaptive_routing": False},
                        "switch": {"nodes_per_leaf": 2}},
}


GREEDY_RUNS = 5


def run(name: str, doc: dict[str, Any]) -> tuple[str, float, float, str, float, str]:
    spec = build_spec({"name": "tsc", "subnet_base": "10.220", "seed": 3, "switch": SWITCH, **doc})
    build.up(spec)
    try:
        start = time.monotonic()
        result, _report = tune_run.tune(layout.testbed_dir(spec.name) / "inventory.yml", {},
                                       oracle=testbed_oracle)
        elapsed = time.monotonic() - start
        oracle = testbed_oracle(__import__("fabtune.inventory", fromlist=["x"]).read_inventory(
            layout.testbed_dir(spec.name) / "inventory.yml"))
    finally:
        build.down(spec.name)
    assert oracle is not None
    kept = ", ".join(m.name for m in result.moves if m.outcome == "kept") or "none"
    rolled = sum(m.outcome == "rolled_back" for m in result.moves)
    whole_plan = GREEDY_RUNS * (1 + sum(len(group) for group in result.planned))
    same_moves = GREEDY_RUNS * (1 + len(result.moves))
    runs = (f"{result.runs} | {whole_plan} ({result.runs / whole_plan:.0%}) "
            f"| {same_moves} ({result.runs / same_moves:.0%})")
    return kept, oracle["tuned_busbw"], oracle["best_busbw"], f"{rolled}", elapsed, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-"))
    print("| scenario | kept moves | rolled back (verified) | tuned busbw (GB/s) | oracle best (GB/s) "
          "| share of best | wall time (s) | benchmark runs | greedy-5, whole plan | greedy-5, same moves |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only:
        kept, tuned, best, rolled, elapsed, runs = run(name, SCENARIOS[name])
        print(f"| {name} | {kept} | {rolled} | {tuned:.1f} | {best:.1f} | {tuned / best:.1%} | {elapsed:.0f} "
              f"| {runs} |", flush=True)


if __name__ == "__main__":
    main()
