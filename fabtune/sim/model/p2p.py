"""Point-to-point ``ib_write_bw`` rounds: concurrent flows sharing NIC, uplink and spine links.

Each flow's QPs take a path (ECMP hash per run for RoCE, destination-based for static IB, spread
over every spine with AR); link capacity is shared max-min fairly, then the class's congestion
behaviour (PFC, DCQCN, lossy collapse) scales each flow's share.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from fabtune.sim.model import link, noise, params
from fabtune.sim.model.config import FabricConfig, Flow, NicConfig
from fabtune.sim.model.congestion import Traffic, congested, f_cc, flow_counters
from fabtune.sim.model.qos import ClassPath, class_path
from fabtune.sim.model.results import Counters, NicRef, P2PResult, P2PRun
from fabtune.sim.model.routing import leaf_of, sl_dropped
from fabtune.sim.model.transport import gid_failure, resolve_gid, with_gid

LinkId = tuple[object, ...]


@dataclasses.dataclass(frozen=True)
class _Sub:
    """A share of one flow (one QP, or one spine's slice under AR) on a fixed path."""

    flow: int
    demand: float
    links: tuple[LinkId, ...]


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A flow that connected: its ports (as used), class path and standalone demand."""

    index: int
    flow: Flow
    tx: NicConfig
    rx: NicConfig
    cp: ClassPath
    demand: float


def _tos(flow: Flow, tx: NicConfig) -> int:
    """Return the ToS of a flow: ``-T``/``--tclass``, or the rdma_cm default ToS with ``-R``."""
    if flow.tclass is not None:
        return flow.tclass
    return tx.roce_tos if flow.rdma_cm else 0


def _gid_index(flow: Flow, nic: NicConfig) -> int | None:
    """Return the GID index a flow uses: rdma_cm resolves by address and default RoCE mode."""
    if not flow.rdma_cm:
        return flow.gid_index
    want = "v2" if nic.roce_mode == 2 else "v1"
    hits = [i for i, g in enumerate(nic.gids) if g.scope == "ipv4" and g.version == want]
    return hits[0] if hits else len(nic.gids)


def flow_port(flow: Flow, nic: NicConfig) -> NicConfig:
    """Return ``nic`` as ``flow`` uses it: the headers and VLAN tag (PCP) of the GID it connects on."""
    return with_gid(nic, resolve_gid(nic, _gid_index(flow, nic)), sl=flow.sl, tos=_tos(flow, nic),
                    rdma_cm=flow.rdma_cm)


def _prepare(fabric: FabricConfig, i: int, flow: Flow) -> _Prepared | P2PResult:
    """Resolve one flow's endpoints, GIDs and class, or return its failure."""
    tx0 = fabric.hosts[flow.src_host].nics[flow.src_nic]
    rx0 = fabric.hosts[flow.dst_host].nics[flow.dst_nic]
    gids = (resolve_gid(tx0, _gid_index(flow, tx0)), resolve_gid(rx0, _gid_index(flow, rx0)))
    if not link.is_ib(tx0):
        failure = gid_failure(fabric, (flow.src_host, flow.dst_host), gids)
        if failure is not None:
            return P2PResult(0.0, 0.0, failure)
    elif sl_dropped(fabric.sm, flow.sl):
        return P2PResult(0.0, 0.0, "timeout")
    tx, rx = flow_port(flow, tx0), flow_port(flow, rx0)
    cp = class_path(tx, rx, fabric.switch, _tos(flow, tx0))
    return _Prepared(i, flow, tx, rx, cp, _demand(flow, tx, rx))


def _demand(flow: Flow, tx: NicConfig, rx: NicConfig) -> float:
    """Return a flow's idle-fabric rate: both ends' limits, GPU buffers at their distance."""
    rate = min(link.demand_gbps(n, flow.msg_size, flow.qps) for n in (tx, rx))
    if flow.use_cuda:
        rate *= min(params.F_GDR_FAR[n.gpu_distance] for n in (tx, rx))
    return rate


def _spines(fabric: FabricConfig, f: _Prepared, qp: int, run_index: int) -> list[int]:
    """Return the spine(s) one QP of a cross-leaf flow crosses."""
    sw, ib = fabric.switch, link.is_ib(f.tx)
    ar = sw.adaptive_routing if not ib else fabric.sm.adaptive_routing
    if ar:
        return list(range(sw.spines))
    if ib:
        return [f.flow.dst_host % sw.spines]
    rng = noise.rng_for(fabric.seed, run_index, 1_000_003 * (f.index + 1) + qp)
    return [int(rng.integers(0, sw.spines))]


def _subflows(fabric: FabricConfig, f: _Prepared, run_index: int) -> list[_Sub]:
    """Split a flow into per-QP (and per-spine under AR) shares with their links."""
    fl, sw = f.flow, fabric.switch
    src = ("tx", fl.src_host, fl.src_nic)
    dst = ("rx", fl.dst_host, fl.dst_nic)
    la, lb = leaf_of(sw, fl.src_host), leaf_of(sw, fl.dst_host)
    subs: list[_Sub] = []
    for qp in range(fl.qps):
        spines = [None] if la == lb else _spines(fabric, f, qp, run_index)
        for s in spines:
            mid: tuple[LinkId, ...] = (
                () if s is None else (("up", fl.src_nic, la, s), ("dn", fl.dst_nic, s, lb))
            )
            subs.append(_Sub(f.index, f.demand / fl.qps / len(spines), (src, *mid, dst)))
    return subs


def _capacities(fabric: FabricConfig, flows: Sequence[_Prepared]) -> dict[LinkId, float]:
    """Return the capacity of every link the flows touch (uplinks: leaf share per spine)."""
    sw = fabric.switch
    caps: dict[LinkId, float] = {}
    for f in flows:
        fl = f.flow
        caps[("tx", fl.src_host, fl.src_nic)] = link.ceiling_gbps(f.tx)
        caps[("rx", fl.dst_host, fl.dst_nic)] = link.ceiling_gbps(f.rx)
    uplink = max(f.tx.rate_gbps for f in flows) if flows else 0.0
    per_spine = uplink * sw.nodes_per_leaf / (sw.spines * max(sw.oversubscription, 1e-9))
    return defaultdict(lambda: per_spine, caps)


def max_min_share(subs: Sequence[_Sub], caps: dict[LinkId, float]) -> list[float]:
    """Return the max-min fair rate of every share (progressive filling).

    Args:
        subs: the shares, each with its demand and links.
        caps: link capacities in Gb/s.

    Returns:
        One rate per share, never above its demand nor any link's capacity in total.
    """
    rates, left = [0.0] * len(subs), {lk: caps[lk] for s in subs for lk in s.links}
    active = {i for i, s in enumerate(subs) if s.demand > 0}
    while active:
        users: dict[LinkId, int] = defaultdict(int)
        for i in active:
            for lk in subs[i].links:
                users[lk] += 1
        inc = min([left[lk] / n for lk, n in users.items()] + [subs[i].demand - rates[i] for i in active])
        for i in active:
            rates[i] += inc
        for lk, n in users.items():
            left[lk] -= inc * n
        active = {i for i in active if _still_active(subs[i], rates[i], left)}
    return rates


def _still_active(sub: _Sub, rate: float, left: dict[LinkId, float]) -> bool:
    """Return True while a share wants more and none of its links is full."""
    return rate < sub.demand - 1e-9 and all(left[lk] > 1e-9 for lk in sub.links)


def _overloads(subs: Sequence[_Sub], caps: dict[LinkId, float], n: int) -> list[float]:
    """Return each flow's worst offered overload (sum of demands / capacity on its links)."""
    offered: dict[LinkId, float] = defaultdict(float)
    for s in subs:
        for lk in s.links:
            offered[lk] += s.demand
    rho = [0.0] * n
    for s in subs:
        rho[s.flow] = max([rho[s.flow]] + [offered[lk] / caps[lk] for lk in s.links if caps[lk] > 0])
    return rho


def p2p(
    fabric: FabricConfig,
    flows: Sequence[Flow],
    run_index: int = 0,
    *,
    duration_s: float = 5.0,
    noisy: bool = True,
) -> P2PRun:
    """Run one round of concurrent ``ib_write_bw`` flows through the model.

    Args:
        fabric: the rack.
        flows: flows that run at the same time (a pair-matrix round, or a k:1 incast).
        run_index: which repetition (selects the noise and the per-run ECMP hash).
        duration_s: run length, for counter deltas (perftest ``-D``).
        noisy: False gives the noise-free expectation (calibration, oracle).

    Returns:
        One result per flow, in order, and counter deltas per NIC.
    """
    prepared = [_prepare(fabric, i, f) for i, f in enumerate(flows)]
    ok = [p for p in prepared if isinstance(p, _Prepared)]
    subs = [s for p in ok for s in _subflows(fabric, p, run_index)]
    caps = _capacities(fabric, ok)
    share = [0.0] * len(flows)
    for s, r in zip(subs, max_min_share(subs, caps), strict=True):
        share[s.flow] += r
    rho = _overloads(subs, caps, len(flows))
    rates = _apply_cc(ok, share, rho)
    results = [
        p if isinstance(p, P2PResult) else _result(fabric, p, rates[p.index], run_index if noisy else None)
        for p in prepared
    ]
    return P2PRun(tuple(results), _counters(ok, rates, rho, duration_s))


def _apply_cc(ok: Sequence[_Prepared], share: list[float], rho: list[float]) -> list[float]:
    """Scale fair shares by the class's congestion behaviour, then spread PFC HoL blocking."""
    rates = list(share)
    for p in ok:
        rates[p.index] = share[p.index] * f_cc(p.cp, rho[p.index], collective=False)
    paused: dict[tuple[int, int, int], float] = {}
    for p in ok:
        key = (p.flow.src_host, p.flow.src_nic, p.cp.tx_prio)
        if p.cp.lossless and not p.cp.dcqcn and congested(rho[p.index]):
            paused[key] = min(paused.get(key, rates[p.index]), rates[p.index])
    for p in ok:
        key = (p.flow.src_host, p.flow.src_nic, p.cp.tx_prio)
        rates[p.index] = min(rates[p.index], paused.get(key, rates[p.index]))
    return rates


def _result(fabric: FabricConfig, p: _Prepared, rate: float, run_index: int | None) -> P2PResult:
    """Add noise (reflected below the flow's idle-fabric rate; none without a run) and latency."""
    jitter = 1.0
    if run_index is not None:
        jitter = noise.factor(noise.rng_for(fabric.seed, run_index, p.index), params.CV_P2P)
    goodput = noise.below(rate * jitter, p.demand)
    sw = fabric.switch
    hops = 1 if leaf_of(sw, p.flow.src_host) == leaf_of(sw, p.flow.dst_host) else 3
    return P2PResult(goodput, link.latency_us(p.flow.msg_size, max(goodput, 1e-9), hops))


def _counters(
    ok: Sequence[_Prepared], rates: list[float], rho: list[float], secs: float
) -> dict[NicRef, Counters]:
    """Sum the counter deltas of every flow onto its sender and receiver NICs."""
    out: dict[NicRef, Counters] = defaultdict(Counters)
    for p in ok:
        t = Traffic(rates[p.index], secs, link.active_mtu(p.tx), p.flow.qps, p.tx.rate_gbps)
        tx, rx = flow_counters(p.cp, rho[p.index], t)
        out[(p.flow.src_host, p.flow.src_nic)] += tx
        out[(p.flow.dst_host, p.flow.dst_nic)] += rx
    return dict(out)
