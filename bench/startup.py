"""CPU time of a Python process's start: the CLI and the emulated tools, today's tree against an earlier one.

Every `fabtune` command and every emulated tool on the testbed's hosts (each nccl-tests rank, each
ib_write_bw, each mlnx_qos...) is a new Python process that imports fabtune. This measures the CPU
time (user + system, from the child's rusage) of:

* `python -m fabtune --help` (the CLI's imports; the verbs' one-line help comes from
  `fabtune.commands.SUMMARIES` since 888d214, no verb module imported);
* `python -m fabtune runs` on an empty ``FABTUNE_HOME`` (a light verb: its own module only, since
  the verbs load lazily) and `python -m fabtune tune --help` (the tuning loop's imports);
* `import fabtune.sim.tools.<tool>` for the tools that run most often.

Each tree is taken with ``git archive`` (the earlier revision) or as it is (this checkout), put
first on PYTHONPATH, and run with bytecode written beforehand (``compileall``, as an installed
wheel has) and without any (every module compiled from source, as under PYTHONDONTWRITEBYTECODE
with no .pyc present). Median of ``--repeat`` runs each.

Usage: .venv/bin/python bench/startup.py [--baseline REV] [--repeat N]
Prints a Markdown table (CPU seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gitrev import extract

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("nccl_tests", "perftest", "mlnx_qos", "ethtool")
DEADLINE_S = 120


def tree_of(rev: str | None, where: Path) -> Path:
    """The ``fabtune`` package of ``rev`` (None: this checkout's, copied) under ``where``."""
    if rev is None:
        shutil.copytree(REPO / "fabtune", where / "fabtune",
                        ignore=shutil.ignore_patterns("__pycache__"))
        return where
    return extract(rev, "fabtune", where, DEADLINE_S)


def cpu_of(argv: list[str], tree: Path) -> float:
    """CPU seconds (user + system) of one run of ``argv`` with ``tree`` first on PYTHONPATH (and an
    empty ``FABTUNE_HOME`` of its own)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
           "FABTUNE_HOME": str(tree / "home")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=tree, check=True, capture_output=True, timeout=DEADLINE_S)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands() -> dict[str, list[str]]:
    fabtune = [sys.executable, "-m", "fabtune"]
    found = {"fabtune --help": [*fabtune, "--help"], "fabtune runs": [*fabtune, "runs"],
             "fabtune tune --help": [*fabtune, "tune", "--help"]}
    for tool in TOOLS:
        found[f"tool {tool}"] = [sys.executable, "-c", f"import fabtune.sim.tools.{tool}"]
    return found


def measure(tree: Path, repeat: int) -> dict[str, float]:
    return {name: statistics.median(cpu_of(argv, tree) for _ in range(repeat))
            for name, argv in commands().items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="9efb94e", help="the earlier revision (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="fabtune-startup-") as tmp:
        for label, rev in ((args.baseline, args.baseline), ("current", None)):
            tree = tree_of(rev, Path(tmp) / label)
            results[f"{label}, no bytecode"] = measure(tree, args.repeat)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "fabtune")], check=True,
                           timeout=DEADLINE_S)
            results[f"{label}, bytecode"] = measure(tree, args.repeat)
    columns = list(results)
    print(f"| process (CPU s, median of {args.repeat}) | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name in commands():
        print(f"| {name} | " + " | ".join(f"{results[c][name]:.2f}" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
