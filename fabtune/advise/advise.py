"""The advice: the job at each N on each fabric option, the scaling, where the fabric starts to
cost, and at which N InfiniBand pays (docs/advisor.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fabtune.advise import fabric
from fabtune.advise.job import JobSpec, fit, fit_problem
from fabtune.advise.measured import Measured
from fabtune.advise.model import Bandwidth, StepTime, step_time
from fabtune.errors import ConfigError

FABRIC_BOUND_SHARE = 0.10  # the fabric "costs" a job once its exposed time is this share of a step
IB_PAYS = 1.05  # IB pays when it gives this much more throughput than RoCE as tuned
SEARCH_LIMIT = 1 << 16  # nodes: the largest N the bottleneck and crossover searches try


@dataclass(frozen=True)
class Row:
    """The job at ``step.nodes`` on one fabric option."""

    option: str
    per_gpu: float  # GB/s, the projected per-GPU fabric bandwidth
    step: StepTime
    scaling: float  # per-GPU throughput against the reference N


@dataclass(frozen=True)
class Advice:
    """Everything the advisor says, in the order the table shows it."""

    job: JobSpec
    measured: Measured
    topology: fabric.Topology
    nodes: tuple[int, ...]
    reference_nodes: int
    rows: tuple[Row, ...]
    fabric_bound: dict[str, int | None]  # per option, the first N where the fabric costs >= 10 %
    ib_pays_from: int | None  # first N where IB NDR beats RoCE as tuned by >= 5 %
    verdict: str
    assumptions: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The advice as a JSON-ready mapping."""
        return {
            "job": asdict(self.job),
            "measured": asdict(self.measured),
            "topology": asdict(self.topology),
            "nodes": list(self.nodes),
            "reference_nodes": self.reference_nodes,
            "rows": [
                {"option": r.option, "per_gpu_gbytes": r.per_gpu, "scaling": r.scaling, **asdict(r.step)}
                for r in self.rows
            ],
            "fabric_bound_from": self.fabric_bound,
            "ib_pays_from": self.ib_pays_from,
            "verdict": self.verdict,
            "assumptions": list(self.assumptions),
        }


def _bandwidth(job: JobSpec, measured: Measured, option: fabric.FabricOption, topo: fabric.Topology,
               nodes: int) -> Bandwidth:
    rack = fabric.Rack(measured.kind, measured.nodes, measured.qps)
    gpn = job.gpus_per_node
    return Bandwidth(
        net=fabric.project(measured.per_gpu(gpn), rack, option, topo, nodes),
        alltoall=fabric.project(measured.alltoall_per_gpu(gpn), rack, option, topo, nodes),
        nvlink=job.nvlink_busbw,
    )


def predict(job: JobSpec, measured: Measured, option: fabric.FabricOption, topo: fabric.Topology,
            nodes: int) -> tuple[float, StepTime]:
    """The projected per-GPU bandwidth and the step at ``nodes`` on ``option``."""
    bw = _bandwidth(job, measured, option, topo, nodes)
    return bw.net, step_time(job, fit(job, nodes), bw)


def candidates(job: JobSpec, start: int) -> list[int]:
    """N to search: start, 2 start, 4 start ... where the job fits, up to SEARCH_LIMIT nodes."""
    out, n = [], max(1, start)
    while n <= SEARCH_LIMIT:
        if fit_problem(job, n) is None:
            out.append(n)
        n *= 2
    return out


def _first(ns: Sequence[int], test: Any) -> int | None:
    return next((n for n in ns if test(n)), None)


def advise(job: JobSpec, measured: Measured, nodes: Sequence[int], topo: fabric.Topology) -> Advice:
    """The advice for ``job`` at each of ``nodes`` from the rack's ``measured`` bandwidth."""
    problems = [p for p in (fit_problem(job, n) for n in nodes) if p]
    if problems:
        raise ConfigError(f"job {job.name} on the cluster", problems)
    opts = fabric.options(measured.qps)
    reference = measured.nodes if fit_problem(job, measured.nodes) is None else min(nodes)
    rows = []
    for n in sorted(set(nodes)):
        for opt in opts:
            per_gpu, step = predict(job, measured, opt, topo, n)
            _, ref = predict(job, measured, opt, topo, reference)
            scaling = (step.tokens_per_s / step.gpus) / (ref.tokens_per_s / ref.gpus)
            rows.append(Row(opt.name, per_gpu, step, scaling))
    search = sorted(set(candidates(job, reference)) | set(nodes))
    by_name = {o.name: o for o in opts}

    def mfu(name: str, n: int) -> float:
        return predict(job, measured, by_name[name], topo, n)[1].mfu

    def costs(option: fabric.FabricOption, n: int) -> bool:
        return predict(job, measured, option, topo, n)[1].fabric_share >= FABRIC_BOUND_SHARE

    bound = {o.name: _first(search, lambda n, o=o: costs(o, n)) for o in opts}
    pays = _first(search, lambda n: mfu("ib-ndr", n) >= IB_PAYS * mfu("roce", n))
    verdict = _verdict(topo, pays, search, mfu, measured.qps)
    per_gpu = measured.per_gpu(job.gpus_per_node)
    gpus = measured.gpus or job.gpus_per_node
    line = (
        f" = {per_gpu / (measured.nic_gbytes / gpus):.0%} of its line rate "
        f"({measured.nic_gbytes / gpus:.1f} GB/s)"
        if measured.nic_gbytes
        else ""
    )
    notes = (
        *(f"the measurement's checks did not all pass ({w}): the busbw may not be the fabric's"
          for w in measured.warnings),
        f"measured: run {measured.run_id} ({measured.phase}), {measured.nodes} {measured.kind} nodes, "
        f"all_reduce busbw {measured.all_reduce:.1f} GB/s = {per_gpu:.1f} GB/s per GPU over "
        f"{gpus} GPUs/node{line}",
        f"compute at {job.achievable:g} of {job.peak_tflops:g} TFLOP/s per GPU; "
        "model FLOPs 6 N + 12 L h s per token",
        f"DP gradient reduction hidden behind {job.overlap:g} of the last micro-batch's backward; "
        "TP and EP communication and pipeline fill/drain exposed",
        f"scaling: per-GPU throughput against N={reference}; the fabric costs a job once its exposed "
        f"time is {FABRIC_BOUND_SHARE:.0%} of a step; IB pays at {IB_PAYS - 1:.0%} more throughput",
        *fabric.assumptions(topo),
    )
    listed = tuple(sorted(set(nodes)))
    return Advice(job, measured, topo, listed, reference, tuple(rows), bound, pays, verdict, notes)


def _verdict(topo: fabric.Topology, pays: int | None, search: Sequence[int], mfu: Any, qps: int) -> str:
    beyond = topo.leaf_nodes + 1
    roce_bw = fabric.route_factor(fabric.options(qps)[0], topo, beyond)
    ib_bw = fabric.route_factor(fabric.options(qps)[3], topo, beyond)
    rail_local = (
        f"RoCE and InfiniBand give this job the same up to {topo.leaf_nodes} nodes (rail-local); beyond, "
        f"traffic crosses the spine and RoCE as tuned keeps {roce_bw:.0%} of its per-GPU bandwidth "
        f"(ECMP collisions), InfiniBand with adaptive routing {ib_bw:.0%}"
    )
    if pays is None:
        top = search[-1] if search else topo.leaf_nodes
        gap = mfu("ib-ndr", top) / mfu("roce", top) - 1 if search else 0.0
        return (
            f"{rail_local}; for this job, up to N={top} InfiniBand never gives {IB_PAYS - 1:.0%} more "
            "throughput "
            f"(+{gap:.1%} at N={top}): the job's exposed fabric time is too small for routing to matter"
        )
    ar = mfu("roce+ar", pays) / mfu("ib-ndr", pays)
    gain = mfu("ib-ndr", pays) / mfu("roce", pays) - 1
    return (
        f"{rail_local}; for this job, from N={pays} InfiniBand NDR gives {gain:+.0%} "
        f"throughput over RoCE as tuned; RoCE with "
        f"adaptive routing reaches {ar:.0%} of InfiniBand there"
    )
