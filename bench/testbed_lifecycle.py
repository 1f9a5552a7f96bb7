"""Time to build and tear down an emulated rack of 8 and 16 hosts (median of several runs).

Usage (root): .venv/bin/python bench/testbed_lifecycle.py [--runs 5] [--hosts 8 16]
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

from fabtune.testbed import build
from fabtune.testbed.spec import build_spec


def measure(hosts: int, runs: int) -> tuple[list[float], list[float]]:
    spec = build_spec({"name": "bench", "hosts": hosts, "subnet_base": "10.209", "nics_per_host": 4})
    ups, downs = [], []
    for _ in range(runs):
        start = time.perf_counter()
        build.up(spec)
        ups.append(time.perf_counter() - start)
        assert build.healthy(spec)
        start = time.perf_counter()
        build.down(spec.name)
        downs.append(time.perf_counter() - start)
        assert build.leftovers(spec.name) == []
    return ups, downs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hosts", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-"))
    print(f"machine: {os.cpu_count()} CPUs, kernel {platform.release()}, "
          f"{args.runs} runs each, 4 NICs/host\n")
    print("| hosts | up median (s) | up min-max (s) | down median (s) | down min-max (s) |")
    print("|---|---|---|---|---|")
    for hosts in args.hosts:
        ups, downs = measure(hosts, args.runs)
        print(f"| {hosts} | {statistics.median(ups):.2f} | {min(ups):.2f}-{max(ups):.2f} "
              f"| {statistics.median(downs):.2f} | {min(downs):.2f}-{max(downs):.2f} |")


if __name__ == "__main__":
    main()
