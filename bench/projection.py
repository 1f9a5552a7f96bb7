"""Projection of a whole `fabtune tune` run on a real rack: benchmark runs, benchmark time, Ansible time.

The real loop (``fabtune.tune.loop.Tuner``: its plan from ``fabtune.knobs.plan``, its decisions from
``fabtune.tune.stats``, default ``TuneOptions``) runs over :class:`ModelRack`, an in-process backend
whose hosts are the fabric model's (``fabtune.sim.model``): N nodes of 8 GPUs and 8 RoCE NICs of
400G each (rail-optimised, GPU-NIC distance PIX, GID 3 = RoCEv2 IPv4), 32 nodes per leaf, 16
spines, hashed ECMP, the switch lossless on priority 3 with ECN on it (the calibration's switch).
``apply`` sets the knobs the loop sends on every host and the model's configuration follows them;
each repetition is one emulated ``all_reduce_perf`` and one ``alltoall_perf`` at the loop's sizes
(8 GiB): the model's ``collective`` over every host x GPU, with its noise (log-normal, 2 % CV at
8 GiB, plus its slow runs: 2 % of runs at 0.5-0.9x) and its counter deltas (the pause frames the
loop's guard reads).
Runs are seeded (``--seed``): the same arguments print the same numbers.

Rack states: **factory-defaults** (every NIC as shipped: PCP trust, no PFC, ECN on every priority,
ToS 0, MTU 1500; no NCCL settings); **already-tuned**: the state the factory-defaults run of the
same size left (its tuned desired state), tuned again.

Benchmark time (every assumption; real hardware, not this machine):

* one launch runs the loop's own nccl-tests options (``MeasureSpec.options``: today one size,
  8 GiB, ``-n 20 -w 5``) with nccl-tests' default data check (``-c 1``): nccl-tests
  (``src/common.cu``, ``TimeTest``/``BenchTime``) warms up ``-w`` iterations at the largest size and
  ``-w`` at the smallest, then per size times ``-n`` out-of-place and ``-n`` in-place iterations
  and runs one checked iteration after each: today 2x5 + 2x20 + 2 = 52 collectives of 8 GiB;
* each collective takes S / algbw, with algbw = busbw / factor (nccl-tests ``doc/PERFORMANCE.md``:
  factor 2(n-1)/n for all_reduce, (n-1)/n for alltoall, n ranks = 8 x nodes) and busbw the run's
  own (the model's, with its noise);
* each launch costs a fixed start-up besides: ``--launch-s`` (10 s: mpirun/srun fan-out, CUDA
  contexts, NCCL communicator set-up, 2 x 8 GiB of buffers per GPU) plus ``--launch-per-node-s``
  (0.01 s per node: NCCL's bootstrap and connection set-up growing with ranks). Both are estimates,
  not measurements.

Ansible time (measured per-host costs, scaled by waves of ``--forks`` hosts):

* measured on the 2-host testbed with 8 RoCE NICs per host, as the projected nodes have
  (``bench/apply_cost.py --nics 8``): an armed apply 5.8 s wall, a confirm 1.6 s; both hosts ran in
  parallel, so these are one wave's time. With ``--forks`` 50 (an assumption: Ansible's linear
  strategy runs each task on up to ``forks`` hosts at once) a call over N hosts takes
  ceil(N / forks) waves; the controller is assumed not to be the bottleneck at 50 forks;
* not measured, assumed: an ib_write_bw measurement of the loop (``Tuner``'s pair round: the
  covering pair round and the incast stage) is two Ansible runs, each a confirm's cost plus
  ``PAIR_RUN_S`` (the 2 s ``-D`` run, server start and rdma_cm connection) plus, where the
  round's hosts run in one wave, the whole wait for the clients' common start (``start_lead_s``);
  its bandwidths are not modelled (no decision changes);
* not measured, assumed: a rollback's exact apply costs an armed apply; extending the revert
  deadline, reading facts, and reading the pause counters around a batch of measurements each
  cost a confirm.

Usage: .venv/bin/python bench/projection.py [--nodes 8 32 256 1024] [--seed 1]
Prints a Markdown table for docs/benchmarks.md, then one line per node count and rack state:
``projection 32 nodes factory-defaults: 14.2 min`` (benchmark time).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune.ansible import RunOutcome
from fabtune.journal import Journal
from fabtune.perf.deadline import sweep
from fabtune.perf.diagnose import Diagnosis
from fabtune.sim.model import collective
from fabtune.sim.model.calibration import TUNED_SWITCH
from fabtune.sim.model.collective import bus_factor
from fabtune.sim.model.config import (
    CollectiveOp,
    FabricConfig,
    HostConfig,
    NicConfig,
    SmConfig,
)
from fabtune.sim.observe import applied_tree, nic_from_knobs
from fabtune.state import HostState
from fabtune.tune.loop import TuneOptions, Tuner, TuneResult
from fabtune.tune.measure import Batch, MeasureSpec, Sample
from fabtune.tune.pairs import PairRound

NICS, GPUS, RATE_GBPS = 8, 8, 400.0
_SPEC = MeasureSpec(Path("/nonexistent"), (), GPUS, {})
LOOP = {op: _SPEC.options(f"{op}_perf") for op in ("all_reduce", "alltoall")}  # the loop's own launches
SIZES = {op: sweep(opts) for op, opts in LOOP.items()}  # the sizes each runs (-b .. -e)
ITERS, WARMUP = LOOP["all_reduce"].iters, LOOP["all_reduce"].warmup_iters  # -n, -w (both tests alike)
NODES_PER_LEAF = 32
FACTORY: dict[str, Any] = {
    "trust": "pcp", "pfc": [], "mtu": 1500, "ecn": {"np": list(range(8)), "rp": list(range(8))},
    "cnp_dscp": 48, "cnp_prio": 6, "roce_tos": 0, "roce_mode": 2,
}  # fmt: skip
MEASURED_S = {"apply": 5.8, "confirm": 1.6}  # one wave: the 2-host testbed, 8 NICs per host (apply_cost.py)
PAIR_RUN_S = 4.0  # an assumption: ib_write_bw -D 2, plus server start and rdma_cm connection


def start_lead_s(hosts: int, forks: int) -> float:
    """bench_ib_write_bw.yml's wait for the clients' common start (fabtune_bench_start_lead_s's
    default: 1 s plus 50 ms a host, at most 5 s), where the round's hosts run in one wave; counted
    whole, as if Ansible's dispatch of the task took none of it (an upper bound)."""
    return min(1.0 + 0.05 * hosts, 5.0) if hosts <= forks else 0.0
STATES = ("factory-defaults", "already-tuned")


def waves(hosts: int, forks: int) -> int:
    return math.ceil(hosts / max(forks, 1))


@dataclass
class Costs:
    """What the run asked of the rack: backend calls, launches, benchmark seconds per collective."""

    calls: Counter[str] = field(default_factory=Counter)
    launches: Counter[str] = field(default_factory=Counter)
    bench_s: dict[str, float] = field(default_factory=dict)
    startup_s: float = 0.0


class ModelRack:
    """The loop's backend over the fabric model at ``nodes`` nodes (see the module docstring)."""

    def __init__(self, nodes: int, state: Mapping[str, HostState] | None, *, seed: int,
                 launch_s: float) -> None:
        self.names = [f"node{i:04d}" for i in range(nodes)]
        self.ports = tuple(
            NicConfig(name=f"mlx5_{i}", netdev=f"eth{2 + i}", rate_gbps=RATE_GBPS, gpu_distance="PIX")
            for i in range(NICS)
        )
        netdevs = [p.netdev for p in self.ports]
        factory = {"nics": {dev: copy.deepcopy(FACTORY) for dev in netdevs}, "nccl": {}}
        self.state = {h: state[h].tree() if state else copy.deepcopy(factory) for h in self.names}
        self.hardware = {
            "ports": [{"dev": p.name, "netdev": p.netdev, "roce_v2_gid_index": 3,
                       "rate": "400 Gb/sec (4X NDR)"} for p in self.ports],
            "topology": None,
        }
        switch = dataclasses.replace(TUNED_SWITCH, nodes_per_leaf=NODES_PER_LEAF,
                                     leaves=max(1, -(-nodes // NODES_PER_LEAF)))
        self.base = FabricConfig("roce", (), switch, SmConfig(), seed=seed)
        self.fabric = self._model()
        self.launch_s = launch_s
        self.costs = Costs()
        self.rounds_ahead = 0  # pair rounds run with the last apply, not yet taken by ``pairs``
        self.ok = RunOutcome("successful", 0, {"failures": {}, "dark": {}}, (), Path("/nonexistent"))

    def _model(self) -> FabricConfig:
        """The model's rack from the hosts' state; hosts in the same state share one configuration."""
        shared: dict[str, tuple[tuple[NicConfig, ...], tuple[tuple[str, str], ...]]] = {}
        hosts = []
        for name in self.names:
            tree = self.state[name]
            key = json.dumps(tree, sort_keys=True)
            if key not in shared:
                knobs = tree.get("nics") or {}
                nics = tuple(nic_from_knobs(p, knobs.get(p.netdev, {})) for p in self.ports)
                env = tuple(sorted((k, str(v)) for k, v in (tree.get("nccl") or {}).items()))
                shared[key] = nics, env
            nics, env = shared[key]
            hosts.append(HostConfig(name, nics, gpus=GPUS, nccl_env=env))
        return dataclasses.replace(self.base, hosts=tuple(hosts))

    # -- the Backend protocol (fabtune.tune.loop.Backend) ------------------------------------

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, dict[str, Any]]:
        self.costs.calls["facts"] += 1  # charged as a call over the whole rack (an upper bound)
        return {h: {**copy.deepcopy(s), "hardware": self.hardware} for h, s in self.state.items()
                if hosts is None or h in hosts}

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        pass

    def apply(self, desired: Mapping[str, HostState], *, run_id: str | None = None,
              snapshots: Mapping[str, HostState] | None = None, exact: bool = False,
              roles: Sequence[str] | None = None, measure_after: int = 0,
              facts_after: bool = False, pairs_after: int = 0) -> RunOutcome:
        self.costs.calls["rollback apply" if exact else "armed apply"] += 1
        # the rounds asked for with the apply run after its first batch whether or not the move is
        # then judged on them (a move the collectives alone roll back): counted here, taken later
        self.costs.calls["pair round"] += pairs_after
        self.rounds_ahead = pairs_after
        for host, tree in desired.items():
            self.state[host] = applied_tree(self.state[host], tree.tree(), exact)
        self.fabric = self._model()
        return self.ok

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.costs.calls["confirm"] += 1
        return self.ok

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        return False  # its state is not shared across threads: confirm before the read back

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> RunOutcome:
        self.costs.calls["extend"] += 1
        return self.ok

    def diagnose(self, log: str, why: str) -> Diagnosis:
        return Diagnosis([], [])

    def pairs(self) -> PairRound:
        """The cost of one ib_write_bw measurement (the covering pair round and the incast stage: two
        Ansible runs); its numbers are not modelled here and never change, so no decision does. A
        round run with the move's apply (its ``pairs_after``) was counted there."""
        if self.rounds_ahead > 0:
            self.rounds_ahead -= 1
        else:
            self.costs.calls["pair round"] += 1
        return PairRound({"unmodelled": 1.0})

    def pair_matrix(self, full: bool) -> list[Any]:
        """The report's pair matrix after the baseline and at the end: counted as one more pair
        round each (the default, ``round``); its numbers feed no decision."""
        self.costs.calls["pair round"] += 1
        return []

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        self.costs.calls["counter reads"] += 1
        samples, pauses = [], 0
        for _ in range(repetitions):
            busbw: list[float] = []
            for op in ("all_reduce", "alltoall"):
                value, paused = self._launch(op)
                busbw.append(value)
                pauses += paused
            samples.append(Sample(busbw[0], busbw[1]))
        return Batch(tuple(samples), pauses)

    def _launch(self, op: CollectiveOp) -> tuple[float, int]:
        """One launch through the model: its busbw, its pause frames, its time on real hardware."""
        run = sum(self.costs.launches.values())
        sizes = SIZES[op]
        res = collective(self.fabric, op, sizes, run, iters=2 * ITERS)
        if res.failure is not None or not res.rows:
            raise RuntimeError(f"{op} cannot run on the projected rack: {res.failure}")
        factor = bus_factor(op, GPUS * len(self.names))
        seconds = {r.size: r.size / (r.busbw / factor * 1e9) for r in res.rows}  # S / algbw (PERFORMANCE.md)
        # nccl-tests TimeTest: -w warm-ups at the largest size and -w at the smallest; per size -n
        # out-of-place and -n in-place iterations, each followed by one checked iteration (-c 1).
        warm = WARMUP * (seconds[sizes[-1]] + seconds[sizes[0]])
        data = warm + sum((2 * ITERS + 2) * t for t in seconds.values())
        self.costs.launches[op] += 1
        self.costs.bench_s[op] = self.costs.bench_s.get(op, 0.0) + self.launch_s + data
        self.costs.startup_s += self.launch_s
        pauses = sum(sum(c.rx_pause) + sum(c.tx_pause) for c in res.counters.values())
        return res.rows[-1].busbw, pauses


@dataclass(frozen=True)
class Projection:
    nodes: int
    state: str
    result: TuneResult
    costs: Costs
    ansible_s: float

    @property
    def bench_s(self) -> float:
        return float(sum(self.costs.bench_s.values()))

    def per_launch_s(self, op: str) -> float:
        return self.costs.bench_s.get(op, 0.0) / max(self.costs.launches[op], 1)


def ansible_s(costs: Costs, hosts: int, forks: int) -> float:
    """Seconds of Ansible runs: each call's measured (or assumed) one-wave cost x waves."""
    per_call = {
        "armed apply": MEASURED_S["apply"], "rollback apply": MEASURED_S["apply"],
        "confirm": MEASURED_S["confirm"], "extend": MEASURED_S["confirm"], "facts": MEASURED_S["confirm"],
        "counter reads": MEASURED_S["confirm"],
        "pair round": 2 * (MEASURED_S["confirm"] + PAIR_RUN_S + start_lead_s(hosts, forks)),
    }  # fmt: skip
    return sum(per_call[kind] * n for kind, n in costs.calls.items()) * waves(hosts, forks)


def project(nodes: int, state: Mapping[str, HostState] | None, name: str, args: argparse.Namespace,
            workdir: Path) -> Projection:
    launch_s = args.launch_s + args.launch_per_node_s * nodes
    rack = ModelRack(nodes, state, seed=args.seed + nodes, launch_s=launch_s)
    journal = Journal(workdir / f"{nodes}-{name}.sqlite")
    run_id = journal.open_run("tune", f"projection-{nodes}", "-", None)
    result = Tuner(rack, journal, run_id, "roce", options=TuneOptions()).run()
    return Projection(nodes, name, result, rack.costs, ansible_s(rack.costs, nodes, args.forks))


def row(p: Projection) -> str:
    kept = ", ".join(m.name for m in p.result.moves if m.outcome == "kept") or "none"
    rolled = sum(m.outcome == "rolled_back" for m in p.result.moves)
    per_move = f"{p.ansible_s / len(p.result.moves):.0f}" if p.result.moves else "-"
    launches = sum(p.costs.launches.values())
    return (f"| {p.nodes} | {p.state} | {p.result.runs} ({launches}) | {len(p.result.moves)}: kept {kept}; "
            f"{rolled} rolled back | {p.per_launch_s('all_reduce'):.1f} / {p.per_launch_s('alltoall'):.1f} "
            f"| {p.bench_s / 60:.1f} | {p.costs.startup_s / 60:.1f} | {p.ansible_s / 60:.1f} "
            f"| {per_move} "
            f"| {(p.bench_s + p.ansible_s) / 60:.1f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="*", default=[8, 32, 256, 1024])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--forks", type=int, default=50)
    parser.add_argument("--launch-s", type=float, default=10.0)
    parser.add_argument("--launch-per-node-s", type=float, default=0.01)
    parser.add_argument("--workdir", type=Path,
                        help="where the runs' journals go (default: a temporary directory, removed after)")
    args = parser.parse_args(argv)
    if args.workdir is not None:
        report(args, args.workdir)
        return
    with tempfile.TemporaryDirectory(prefix="fabtune-projection-") as tmp:
        report(args, Path(tmp))


def report(args: argparse.Namespace, workdir: Path) -> None:
    """Project every node count and rack state with the runs' journals under ``workdir``; print."""
    print(f"seed {args.seed}, forks {args.forks}, launch start-up {args.launch_s:g} s "
          f"+ {args.launch_per_node_s:g} s per node, -b/-e all_reduce {LOOP['all_reduce'].max_bytes}, "
          f"alltoall {LOOP['alltoall'].max_bytes}, -n {ITERS} "
          f"-w {WARMUP}\n")
    print("| nodes | rack state | benchmark runs (launches) | moves | s per launch: all_reduce / alltoall "
          "| benchmark time (min) | of it start-up (min) | Ansible time (min) | Ansible s per move "
          "| total (min) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    done: list[Projection] = []
    for nodes in args.nodes:
        factory = project(nodes, None, STATES[0], args, workdir)
        tuned = project(nodes, factory.result.desired, STATES[1], args, workdir)
        for p in (factory, tuned):
            print(row(p), flush=True)
            done.append(p)
    print()
    for p in done:
        print(f"projection {p.nodes} nodes {p.state}: {p.bench_s / 60:.1f} min")


if __name__ == "__main__":
    main()
