"""Project the rack's measured per-GPU bandwidth to N nodes, for each fabric option.

A product-side model (the emulator is not imported): a rail-optimised two-tier leaf-spine fabric,
where a job on at most ``leaf_nodes`` nodes keeps every rail on one leaf switch and never crosses a
spine; beyond, the fraction of the bandwidth a synchronised collective keeps depends on how
the traffic is spread over the uplinks. Every factor and its source: docs/advisor.md, "Fabric"
(the numbers come from ../shared/calibration.md, sections 4 and 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ECMP collision prior (calibration.md section 4, Monte-Carlo, two stages): efficiency of a
# synchronised collective, 1 / max link load, when k equal flows (each split over q QPs hashed
# independently) are hashed onto k equal paths. Rows k = 4, 8, 16, 32, 64; columns q = 1, 2, 4, 8.
ECMP_PRIOR: dict[int, dict[int, float]] = {
    4: {1: 0.44, 2: 0.53, 4: 0.61, 8: 0.69},
    8: {1: 0.36, 2: 0.44, 4: 0.53, 8: 0.62},
    16: {1: 0.30, 2: 0.39, 4: 0.48, 8: 0.57},
    32: {1: 0.27, 2: 0.34, 4: 0.44, 8: 0.53},
    64: {1: 0.24, 2: 0.32, 4: 0.41, 8: 0.50},
}
# eff = prior ** ALPHA: the prior is a worst case (no pipelining slack, no rail locality); 0.5 maps
# it onto the published anchors (Hoefler 55-60 % effective bisection, "standard Ethernet 60 %",
# OCI untuned "about half"): calibration.md section 4.
ALPHA = 0.5
QP_SCALING_CAP = 0.9  # E-ECMP + QP scaling: Meta's "up to +40 %", capped at 0.9 (calibration.md section 8)
AR_EFFICIENCY = 0.95  # adaptive routing beyond one leaf: IB AR, Spectrum-X-class RoCE AR (section 8)
# Header-limited goodput at MTU 4096 and 400 Gb/s (calibration.md table 1c): RoCEv2 392.1, IB 397.5.
CEILING = {"roce": 392.1, "ib": 397.5}


@dataclass(frozen=True)
class Topology:
    """The cluster's fabric shape (docs/advisor.md, "Fabric")."""

    leaf_nodes: int = 32  # nodes one leaf serves per rail: a 64-port leaf at 1:1 has 32 down
    oversubscription: float = 1.0  # leaf down:up bandwidth (1.0 = non-blocking)

    @property
    def uplinks(self) -> int:
        """Equal-cost paths out of a leaf (the hashing's k)."""
        return max(1, int(self.leaf_nodes / self.oversubscription))


@dataclass(frozen=True)
class FabricOption:
    """One way to build or run the fabric."""

    name: str
    kind: str  # roce | ib
    routing: str  # ecmp | ecmp-qp | ar
    qps: int = 1  # QPs per connection (NCCL_IB_QPS_PER_CONNECTION), hashed independently
    label: str = ""


def options(qps: int) -> list[FabricOption]:
    """The fabric options the advisor compares: RoCE as tuned (plain 5-tuple ECMP, the rack's QPs
    per connection), RoCE with E-ECMP and 4 QPs (host knobs), RoCE with switch adaptive routing,
    InfiniBand NDR with adaptive routing."""
    return [
        FabricOption("roce", "roce", "ecmp", qps, f"RoCE as tuned (ECMP, {qps} QP/conn)"),
        FabricOption("roce+qp", "roce", "ecmp-qp", max(qps, 4), "RoCE, E-ECMP + 4 QPs/conn"),
        FabricOption("roce+ar", "roce", "ar", qps, "RoCE, switch adaptive routing"),
        FabricOption("ib-ndr", "ib", "ar", qps, "InfiniBand NDR, adaptive routing"),
    ]


def ecmp_prior(k: int, q: int) -> float:
    """The collision prior at k paths and q QPs: the table, log-interpolated in k and q and held at
    its edges; 1.0 with a single path (nothing to collide on)."""
    if k <= 1:
        return 1.0
    ks, qs = sorted(ECMP_PRIOR), sorted(ECMP_PRIOR[4])
    x = min(max(math.log2(k), math.log2(ks[0])), math.log2(ks[-1]))
    y = min(max(math.log2(q), math.log2(qs[0])), math.log2(qs[-1]))
    return _bilinear(x, y, ks, qs)


def _bilinear(x: float, y: float, ks: list[int], qs: list[int]) -> float:
    def bracket(v: float, grid: list[int]) -> tuple[int, int, float]:
        logs = [math.log2(g) for g in grid]
        for i in range(len(grid) - 1):
            if logs[i] <= v <= logs[i + 1]:
                return grid[i], grid[i + 1], (v - logs[i]) / (logs[i + 1] - logs[i])
        return grid[-1], grid[-1], 0.0

    k0, k1, tx = bracket(x, ks)
    q0, q1, ty = bracket(y, qs)
    low = ECMP_PRIOR[k0][q0] * (1 - ty) + ECMP_PRIOR[k0][q1] * ty
    high = ECMP_PRIOR[k1][q0] * (1 - ty) + ECMP_PRIOR[k1][q1] * ty
    return low * (1 - tx) + high * tx


def route_factor(option: FabricOption, topo: Topology, nodes: int) -> float:
    """The fraction of the rail-local per-GPU bandwidth a collective keeps at ``nodes``."""
    if nodes <= topo.leaf_nodes:
        return 1.0  # rail-local: every rail of the job on one leaf, no spine hop
    over = min(1.0, 1.0 / topo.oversubscription)
    if option.routing == "ar":
        return AR_EFFICIENCY * over
    plain = float(ecmp_prior(topo.uplinks, option.qps) ** ALPHA)
    if option.routing == "ecmp-qp":
        return min(QP_SCALING_CAP, plain) * over
    return plain * over


def line_factor(measured_kind: str, option: FabricOption) -> float:
    """Header-limited goodput of the option's link against the measured fabric's (same line rate)."""
    return CEILING[option.kind] / CEILING.get(measured_kind, CEILING["roce"])


@dataclass(frozen=True)
class Rack:
    """Where the per-GPU bandwidth was measured: the fabric type, the nodes, the QPs per connection."""

    kind: str  # roce | ib
    nodes: int
    qps: int = 1


def project(per_gpu: float, rack: Rack, option: FabricOption, topo: Topology, nodes: int) -> float:
    """The per-GPU bandwidth (GB/s) measured on ``rack`` projected to ``nodes`` on ``option``. The
    rack's own routing loss, when it already spans more than a leaf, is taken out first with the
    same model (as the measured fabric routes: plain ECMP for RoCE, AR for IB)."""
    as_measured = FabricOption("measured", rack.kind, "ecmp" if rack.kind == "roce" else "ar", rack.qps)
    lost = route_factor(as_measured, topo, rack.nodes)
    return per_gpu / lost * line_factor(rack.kind, option) * route_factor(option, topo, nodes)


def assumptions(topo: Topology) -> list[str]:
    """The fabric model's assumptions, printed beside its answer."""
    return [
        f"rail-optimised two-tier leaf-spine; a leaf serves {topo.leaf_nodes} nodes per rail; "
        f"oversubscription {topo.oversubscription:g}:1 ({topo.uplinks} uplinks per leaf)",
        f"up to {topo.leaf_nodes} nodes every rail stays on one leaf: no spine hop, RoCE = IB",
        f"beyond: plain ECMP keeps prior(k={topo.uplinks}, QPs)^{ALPHA} of the bandwidth "
        "(collision prior, calibration.md section 4); E-ECMP + QP scaling at most "
        f"{QP_SCALING_CAP}; adaptive routing (IB, or RoCE on AR-capable switches) {AR_EFFICIENCY}",
        "RoCE lossless and well tuned (PFC on the RoCE priority, DCQCN not mis-tuned): "
        "congestion control costs nothing; a lossy or mis-marked RoCE class is a failure, not modelled",
        "same line rate per GPU for every option; IB's smaller headers give it "
        f"{CEILING['ib'] / CEILING['roce']:.3f}x RoCE's goodput at MTU 4096",
        "three-tier fabrics (beyond one spine group) are not modelled: the two-tier factor is reused",
    ]
