"""How the fabric model's cost grows with the rack: one emulated nccl-tests run, and the oracle.

An emulated run is what the emulated ``all_reduce_perf`` computes on rank 0
(``fabtune.sim.tools.nccl_tests.compute``): the model's collective over every host x GPU, out of
place and in place (two ``collective`` calls, each with its counter deltas), here at one size,
8 GiB. The rack is the calibration's rail-optimised RoCE rack (``calibration.rack``: 8 NICs of
400G and 8 GPUs per host, tuned, 32 nodes per leaf), its hosts sharing one NIC tuple; then the
same rack with each host's configuration its own (equal) objects, as the emulated tool builds it
from each rank's JSON. The oracle (``best_config``, what ``fabtune.testbed.oracle`` asks) searches
the knobs of a misconfigured rack of the same hardware: the switch lossless on priority 5 with
ECN, the hosts on priority 3, MTU 1500, GPUDirect RDMA off.

Usage: .venv/bin/python bench/model_scale.py [--runs 3] [--nodes 8 64 256 1024] [--oracle-nodes 8 64]
Prints a Markdown table (median wall time of ``--runs`` repetitions) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable

from fabtune.sim.model import best_config, collective
from fabtune.sim.model.calibration import GIB, nic, rack
from fabtune.sim.model.config import FabricConfig

PRIO5 = tuple(i == 5 for i in range(8))


def misconfigured(hosts: int) -> FabricConfig:
    """The oracle's rack: switch lossless (and ECN) on priority 5; hosts on 3, MTU 1500, GDR off."""
    port = dataclasses.replace(nic(mtu=1500), ecn_np=(False,) * 8)
    fab = rack(hosts, port, env=(("NCCL_NET_GDR_LEVEL", "LOC"), ("NCCL_IB_TC", "106")))
    return dataclasses.replace(fab, switch=dataclasses.replace(fab.switch, pfc=PRIO5, ecn=PRIO5))


def emulated_run(fabric: FabricConfig, run: int) -> None:
    """One emulated all_reduce_perf run at 8 GiB: out-of-place and in-place, with counters."""
    collective(fabric, "all_reduce", [8 * GIB], run, iters=40)
    collective(fabric, "all_reduce", [8 * GIB], run + 1_000_003, iters=20)


def oracle_search(fabric: FabricConfig, _run: int) -> None:
    """One oracle search (the run index is unused: the oracle is noise-free)."""
    best_config(fabric)


def timed(call: Callable[[int], object], runs: int) -> float:
    """The median wall time of ``runs`` calls, in seconds."""
    times = []
    for run in range(runs):
        start = time.perf_counter()
        call(run)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, nargs="*", default=[8, 64, 256, 1024])
    parser.add_argument("--oracle-nodes", type=int, nargs="*", default=[8, 64])
    args = parser.parse_args()
    print("| what | nodes | NICs | wall time (s) |")
    print("|---|---|---|---|")
    for n in args.nodes:
        fab = rack(n, nic())
        took = timed(functools.partial(emulated_run, fab), args.runs)
        print(f"| emulated all_reduce_perf run (collective + counters) | {n} | {8 * n} | {took:.3f} |",
              flush=True)
    for n in args.nodes:
        base = rack(n, nic())
        fab = dataclasses.replace(base, hosts=tuple(copy.deepcopy(h) for h in base.hosts))
        took = timed(functools.partial(emulated_run, fab), args.runs)
        print(f"| the same, each host its own objects | {n} | {8 * n} | {took:.3f} |", flush=True)
    for n in args.oracle_nodes:
        fab = misconfigured(n)
        took = timed(functools.partial(oracle_search, fab), args.runs)
        print(f"| oracle (best_config) | {n} | {8 * n} | {took:.3f} |", flush=True)


if __name__ == "__main__":
    main()
