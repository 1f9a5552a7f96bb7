"""What one nccl-tests batch and one ib_write_bw pair round cost: the direct SSH channel against the
playbooks (bench_measure.yml, bench_ib_write_bw.yml).

On one 2-host testbed (2 RoCE NICs and 2 GPUs per host), after the tuning loop's own facts, each
round measures a batch of 2 repetitions (4 nccl-tests launches) and one covering pair round over
rdma_cm (ib_write_bw, every rail) once over the direct channel (``AnsibleBackend.measure`` and
``.pairs`` as the loop calls them) and once through the playbooks (the same functions without the
channel), alternating, so machine load falls on both alike. Every batch is checked to hold its
samples and every round its pairs' bandwidths. Besides the wall time, the machine's CPU time over
each step (``/proc/stat``: every process, the controller's, the hosts' and the emulated tools'; the
machine otherwise idle): on a loaded machine, as in the test suite, that is what a step costs.

Usage (root): .venv/bin/python bench/measure_channel.py [--rounds N] [--name N] [--subnet-base B]
Prints a Markdown table (medians, seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from fabtune.inventory import read_inventory
from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec
from fabtune.tune import pairs as rdma_cm
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.measure import MeasureSpec, measure

REPETITIONS = 2


def _batch(backend: AnsibleBackend, direct: bool) -> None:
    if direct:
        batch = backend.measure(REPETITIONS)
    else:
        info = backend.info
        spec = MeasureSpec(info.path, info.hosts, backend.gpus, backend.netdevs or {}, info.launcher,
                           info.oob_interface, deadline_s=info.bench_timeout_s,
                           ceilings=backend.ceilings or {}, hw_reads=backend.hw_reads)
        batch = measure(spec, REPETITIONS)
    assert len(batch.samples) == REPETITIONS and not batch.failures, batch


def _round(backend: AnsibleBackend, direct: bool) -> None:
    if direct:
        found = backend.pairs()
    else:
        found = rdma_cm.measure(backend.inventory, backend.views, backend.info.bench_timeout_s)
    assert found is not None and found.pairs and all(v for v in found.pairs.values()), found


def _busy_s() -> float:
    """The machine's CPU time so far (user, nice, system, irq, softirq, steal), in seconds."""
    with Path("/proc/stat").open() as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


def _timed(work: Callable[[AnsibleBackend, bool], None], backend: AnsibleBackend,
           direct: bool) -> tuple[float, float]:
    """Wall time and machine CPU time of one step."""
    start, busy = time.monotonic(), _busy_s()
    work(backend, direct)
    return time.monotonic() - start, _busy_s() - busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="pkmeas")
    parser.add_argument("--subnet-base", default="10.234")
    args = parser.parse_args()
    spec = build_spec({"name": args.name, "subnet_base": args.subnet_base, "seed": 5, "hosts": 2,
                       "nics_per_host": 2, "gpus_per_host": 2})
    build.up(spec)
    try:
        info = read_inventory(layout.testbed_dir(spec.name) / "inventory.yml")
        backend = AnsibleBackend(info)
        backend.learn(backend.facts())
        assert backend._channel() is not None, "the testbed's inventory is one the channel follows"
        backend.pairs()  # reads the hosts' views once, as the loop does
        times: dict[str, dict[bool, list[tuple[float, float]]]] = {"batch": {True: [], False: []},
                                                                   "round": {True: [], False: []}}
        for _ in range(args.rounds):
            for direct in (True, False):
                times["batch"][direct].append(_timed(_batch, backend, direct))
                times["round"][direct].append(_timed(_round, backend, direct))
    finally:
        build.down(spec.name)
    print(f"| step (median of {args.rounds}) | playbook: wall, CPU (s) | direct channel: wall, CPU (s) "
          "| ratio: wall, CPU |")
    print("|---|---|---|---|")
    steps = ((f"nccl-tests batch of {REPETITIONS} repetitions (bench_measure.yml), 2 hosts", "batch"),
             ("ib_write_bw pair round over rdma_cm, 2 rails (bench_ib_write_bw.yml)", "round"))
    for what, key in steps:
        fast = [statistics.median(t[i] for t in times[key][True]) for i in (0, 1)]
        slow = [statistics.median(t[i] for t in times[key][False]) for i in (0, 1)]
        print(f"| {what} | {slow[0]:.2f}, {slow[1]:.2f} | {fast[0]:.2f}, {fast[1]:.2f} | "
              f"{fast[0] / slow[0]:.2f}x, {fast[1] / slow[1]:.2f}x |")


if __name__ == "__main__":
    main()
