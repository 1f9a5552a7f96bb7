"""A whole `fabtune tune` run's wall time, today's code against an earlier revision, side by side.

Each round builds the same 2-host factory-defaults rack (the demo rack's shape: 2 RoCE NICs and
2 GPUs per host, trust pcp, no PFC, MTU 1500, rdma_cm ToS 0, behind switches lossless on
priority 3) twice, and runs `fabtune tune -i INVENTORY` on it with the default tuning options:
once as the earlier revision's CLI (its whole tree taken from git with ``git archive`` and put
first on PYTHONPATH), once as this checkout's. The two alternate within each round, so machine
load falls on both alike; building and removing the rack is not timed.

Usage (root): .venv/bin/python bench/tune_walltime.py [--baseline REV] [--rounds N]
Prints each run's decisions (its ``decision:`` lines: kept or rolled back, and the move), whether
every run of both sides decided the same, and a Markdown table (seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitrev import extract

from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec

REPO = Path(__file__).resolve().parents[1]
SPEC = {"name": "btwt", "subnet_base": "10.227", "seed": 5, "hosts": 2, "nics_per_host": 2,
        "gpus_per_host": 2, "initial": {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500},
        "switch": {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"}}
RUN_DEADLINE_S = 3600


def checkout_of(rev: str, where: Path) -> Path:
    """The tree of git revision ``rev`` (the package and its collection) under ``where``."""
    return extract(rev, "fabtune", where)


DECISION = re.compile(r"decision: (kept|rolled back) (.+?): ")


def decisions(log: Path) -> tuple[str, ...]:
    """The run's decisions in order, as ``kept NAME`` or ``rolled back NAME`` (the CLI's progress lines)."""
    return tuple(f"{m[1]} {m[2]}" for m in DECISION.finditer(log.read_text()))


def one_tune(tree: Path | None, home: Path, log: Path) -> tuple[float, int, str]:
    """Build the rack, run one tune (``tree``: the earlier revision's package), remove the rack."""
    spec = build_spec(SPEC)
    build.up(spec)
    try:
        env = {**os.environ, "FABTUNE_HOME": str(home)}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        inventory = layout.testbed_dir(spec.name) / "inventory.yml"
        start = time.monotonic()
        with log.open("w") as out:
            proc = subprocess.run([sys.executable, "-m", "fabtune", "tune", "-i", str(inventory)],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=tree or REPO, env=env,
                                  timeout=RUN_DEADLINE_S, check=False)
        took = time.monotonic() - start
    finally:
        build.down(spec.name)
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    return took, proc.returncode, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="70d6044", help="git revision of the earlier code")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    home = Path(os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-")))
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    decided: set[tuple[str, ...]] = set()
    with tempfile.TemporaryDirectory(prefix="fabtune-tune-walltime-") as tmp:
        old = checkout_of(args.baseline, Path(tmp) / "tree")
        for n in range(args.rounds):
            for which, tree in (("baseline", old), ("current", None)):
                log = Path(tmp) / f"{which}-{n}.log"
                # Each version keeps its own journal: an earlier schema is not this one's.
                took, rc, last = one_tune(tree, home / which, log)
                print(f"# round {n} {which}: {took:.0f} s, exit {rc}: {last}", flush=True)
                run_decisions = decisions(log)
                decided.add(run_decisions)
                print(f"#   decisions: {'; '.join(run_decisions) or 'none'}", flush=True)
                if rc != 0:
                    print(log.read_text()[-3000:], file=sys.stderr)
                times[which].append(took)
    print(f"# every run decided the same: {'yes' if len(decided) == 1 else 'no'}")
    old_s, new_s = statistics.median(times["baseline"]), statistics.median(times["current"])
    print(f"| tune run, 2-host factory-defaults rack (median of {args.rounds}) | {args.baseline} "
          "| current | ratio |")
    print("|---|---|---|---|")
    print(f"| wall time, s | {old_s:.0f} | {new_s:.0f} | {new_s / old_s:.2f}x |")


if __name__ == "__main__":
    main()
