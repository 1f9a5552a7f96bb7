"""nccl-tests collectives over all hosts x GPUs: transport, per-rail goodput, routing, CC, size.

Large-message busbw (cal §8)::

    net   = R x min_rails(ceiling/8 x eta_nccl x f_path)   GB/s a node can put on the network
    ring  = min(B_intra, net x f_route x f_cc)              all_reduce / all_gather / reduce_scatter
    2-node default all_reduce = min(0.98 B_nvls, 2(n-1)/n x net x f_route x f_cc)   (NVLS tree)
    alltoall = min(B_intra, net x f x (n-1) / (G (n-G)))

then busbw(S) = peak / (1 + (S_half/S)^beta), plus a latency floor per size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

from fabtune.sim.model import link, noise, params
from fabtune.sim.model.config import CollectiveOp, FabricConfig, GidEntry, HostConfig, NicConfig
from fabtune.sim.model.congestion import Traffic, f_cc, flow_counters
from fabtune.sim.model.qos import ClassPath, class_path
from fabtune.sim.model.results import (
    CollectiveResult,
    Counters,
    Failure,
    NicRef,
    SizeResult,
    Transport,
)
from fabtune.sim.model.routing import (
    ecmp_prior,
    ib_ar_active,
    ib_route_eff,
    leaf_of,
    oversub_cap,
    roce_route_eff,
    sl_dropped,
    spans_leaves,
)
from fabtune.sim.model.transport import (
    gdr_used,
    gid_failure,
    path_factor,
    resolve_gid,
    socket_gbytes,
    usable_hcas,
    with_gid,
)

BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything about a collective that does not depend on the message size."""

    transport: Transport
    gdr: bool
    channels: int
    peak: float
    rails: int
    rho: float
    classes: tuple[tuple[NicRef, NicRef, ClassPath], ...] = ()
    failure: Failure | None = None


def ranks(fabric: FabricConfig) -> tuple[int, int]:
    """Return (GPUs per host, total ranks)."""
    g = min((h.gpus for h in fabric.hosts), default=0)
    return g, g * len(fabric.hosts)


def bus_factor(op: CollectiveOp, n: int) -> float:
    """Return nccl-tests' busbw/algbw factor: 2(n-1)/n for all_reduce, (n-1)/n otherwise."""
    return BUS_FACTOR[op] * (n - 1) / n if n > 0 else 0.0


class _Rack:
    """A fabric's hosts indexed once per call: usable NICs, NCCL settings, per-hop results.

    Hosts with equal NICs and NCCL environments (one *kind*) share every per-host and per-hop
    result: each is computed once, for the first host of its kind, and looked up for the others,
    so a run costs O(hosts x rails) look-ups. Hosts holding the very same objects (a uniformly
    configured rack) are told apart by object id alone, without comparing values; ids are valid
    while the fabric (which holds the objects) is alive: only for the duration of one call.
    """

    def __init__(self, fabric: FabricConfig) -> None:
        self.fabric = fabric
        self.kind = _kinds(fabric.hosts)
        self._hops: dict[tuple[object, ...], tuple[ClassPath | None, Failure | None]] = {}
        self._pairs: dict[tuple[object, ...], list[tuple[ClassPath | None, Failure | None]]] = {}
        hcas: dict[int, tuple[int, ...]] = {}
        for kind, h in zip(self.kind, fabric.hosts, strict=True):
            if kind not in hcas:
                hcas[kind] = usable_hcas(h)
        self.hcas = [hcas[kind] for kind in self.kind]
        self.rails = min((len(h) for h in self.hcas), default=0)  # the fewest of any host
        self.firsts = [self.kind.index(kind) for kind in hcas]  # the first host of each kind, in order
        self.distinct: dict[int, ClassPath] = {}  # the ring's class paths, each once (by id)
        self._failure: tuple[Failure | None] | None = None
        self._qps: int | None = None

    def qps(self) -> int:
        """``NCCL_IB_QPS_PER_CONNECTION`` (the smallest any host sets; default 1), read once.

        The first host of each kind stands for its kind (the same value, the same error if any).
        """
        if self._qps is None:
            hosts = self.fabric.hosts
            values = (int(hosts[i].env("NCCL_IB_QPS_PER_CONNECTION") or 1) for i in self.firsts)
            self._qps = min(values, default=1)
        return self._qps

    def ring_pairs(self) -> Iterator[tuple[NicRef, NicRef]]:
        """The (sender, receiver) NIC pairs of the inter-node ring on every rail."""
        n, hcas = len(self.fabric.hosts), self.hcas
        for h in range(n):
            nxt = (h + 1) % n
            for r in range(self.rails):
                yield (h, hcas[h][r]), (nxt, hcas[nxt][r])

    def _routed(self, a: int, b: int) -> bool:
        """Whether traffic between hosts ``a`` and ``b`` crosses a routed (L3) leaf boundary."""
        sw = self.fabric.switch
        return sw.l3 and leaf_of(sw, a) != leaf_of(sw, b)

    def connect(self, a: NicRef, b: NicRef) -> tuple[ClassPath | None, Failure | None]:
        """``_connect`` of one hop, computed once per distinct pair of ports, settings and leaves."""
        key = (self.kind[a[0]], a[1], self.kind[b[0]], b[1], self._routed(a[0], b[0]))
        found = self._hops.get(key)
        if found is None:
            found = self._hops[key] = _connect(self.fabric, a, b)
        return found

    def _pair(self, h: int, nxt: int) -> list[tuple[ClassPath | None, Failure | None]]:
        """The hops from host ``h`` to ``nxt``, rail by rail, up to the first that fails."""
        key = (self.kind[h], self.kind[nxt], self._routed(h, nxt))
        found = self._pairs.get(key)
        if found is None:
            found = []
            for r in range(self.rails):
                found.append(self.connect((h, self.hcas[h][r]), (nxt, self.hcas[nxt][r])))
                if found[-1][1] is not None:
                    break
            self._pairs[key] = found
        return found

    def failure(self) -> Failure | None:
        """The first ring hop's connection failure, host by host and rail by rail (None: all connect).

        Collects the ring's distinct class paths on the way (``distinct``); once per call.
        """
        if self._failure is None:
            self._failure = (self._first_failure(),)
        return self._failure[0]

    def _first_failure(self) -> Failure | None:
        n, seen = len(self.fabric.hosts), set()
        for h in range(n):
            hops = self._pair(h, (h + 1) % n)
            if id(hops) in seen:
                continue
            seen.add(id(hops))
            for cp, failure in hops:
                if failure is not None or cp is None:
                    return failure
                self.distinct[id(cp)] = cp
        return None

    def classes(self) -> list[tuple[NicRef, NicRef, ClassPath]]:
        """The class path of every ring hop (when :meth:`failure` is None)."""
        out: list[tuple[NicRef, NicRef, ClassPath]] = []
        n, hcas = len(self.fabric.hosts), self.hcas
        for h in range(n):
            nxt = (h + 1) % n
            out.extend(
                ((h, hcas[h][r]), (nxt, hcas[nxt][r]), cp)
                for r, (cp, _) in enumerate(self._pair(h, nxt))
                if cp is not None
            )
        return out


def _kinds(hosts: Sequence[HostConfig]) -> list[int]:
    """Number each host by its NICs and NCCL environment: equal values, equal numbers."""
    by_id: dict[tuple[int, int], int] = {}
    by_value: dict[tuple[tuple[NicConfig, ...], tuple[tuple[str, str], ...]], int] = {}
    out = []
    for h in hosts:
        ident = (id(h.nics), id(h.nccl_env))
        if ident not in by_id:
            by_id[ident] = by_value.setdefault((h.nics, h.nccl_env), len(by_value))
        out.append(by_id[ident])
    return out


def _host_net(host: HostConfig, rails: int, op: CollectiveOp) -> float:
    """Return GB/s one host's first ``rails`` usable NICs move: R x slowest rail."""
    # as NCCL uses each port: its GID's headers (RoCEv1, a VLAN tag) set the ceiling
    nics = [with_gid(host.nics[i], _nccl_gid(host, i)) for i in usable_hcas(host)[:rails]]
    per = [link.ceiling_gbps(n) / 8 * params.NCCL_NET_EFF * path_factor(host, n, op) for n in nics]
    return rails * min(per, default=0.0)


def _host_gdr(host: HostConfig, rails: int) -> bool:
    """Return True when NCCL uses GPUDirect RDMA on every one of the host's first ``rails`` NICs."""
    return all(gdr_used(host, host.nics[i]) for i in usable_hcas(host)[:rails])


def _connect(fabric: FabricConfig, a: NicRef, b: NicRef) -> tuple[ClassPath | None, Failure | None]:
    """Return the class path NCCL's QPs get between two NICs, or why they cannot connect."""
    ha, hb = fabric.hosts[a[0]], fabric.hosts[b[0]]
    tx, rx = ha.nics[a[1]], hb.nics[b[1]]
    if link.is_ib(tx):
        if sl_dropped(fabric.sm, int(ha.env("NCCL_IB_SL") or 0)):
            return None, "timeout"  # every packet dropped: the QPs' retries run out
        return class_path(tx, rx, fabric.switch, 0), None
    gids = (_nccl_gid(ha, a[1]), _nccl_gid(hb, b[1]))
    failure = gid_failure(fabric, (a[0], b[0]), gids)
    if failure is not None:
        return None, failure
    tos, sl = int(ha.env("NCCL_IB_TC") or 0), int(ha.env("NCCL_IB_SL") or 0)
    return class_path(with_gid(tx, gids[0], sl=sl, tos=tos), with_gid(rx, gids[1], sl=sl, tos=tos),
                      fabric.switch, tos), None


def _nccl_gid(host: HostConfig, nic: int) -> GidEntry | None:
    """Return the GID NCCL uses on a NIC (``NCCL_IB_GID_INDEX``; unset = dynamic v2 IPv4)."""
    raw = host.env("NCCL_IB_GID_INDEX")
    return resolve_gid(host.nics[nic], int(raw) if raw not in (None, "") else None)


def _overload(hosts: _Rack, op: CollectiveOp) -> float:
    """Return the worst offered overload RoCE collective traffic meets (1.0 = none).

    Beyond one leaf the hashed uplinks carry 1/prior of a link (cal §4) or the
    oversubscription; an all-to-all over 3+ nodes adds transient incast at every receiver.
    """
    fabric = hosts.fabric
    sw, rho = fabric.switch, 1.0
    if spans_leaves(fabric):
        hashed = 1 / params.F_ROUTE_AR if sw.adaptive_routing else 1 / ecmp_prior(sw.spines, hosts.qps())
        rho = max(hashed, sw.oversubscription)
    if op == "alltoall" and len(fabric.hosts) > 2:
        rho = max(rho, params.ALLTOALL_INCAST)
    return rho


def _route(hosts: _Rack, op: CollectiveOp, ib: bool) -> float:
    """Return f_route: 1 on one leaf; beyond it ECMP (RoCE) or SM routing / AR (IB)."""
    fabric = hosts.fabric
    if not spans_leaves(fabric):
        return 1.0
    if ib:
        host = fabric.hosts[0]
        sl = int(host.env("NCCL_IB_SL") or 0)
        ar = ib_ar_active(fabric, host.env("NCCL_IB_ADAPTIVE_ROUTING"), sl)
        eff = ib_route_eff(fabric, op, ar)
    else:
        eff = roce_route_eff(fabric, hosts.qps())
    return min(eff, oversub_cap(fabric.switch))


def _tree_allowed(fabric: FabricConfig) -> bool:
    """Return True when ``NCCL_ALGO`` lets NCCL pick (NVLS-)tree."""
    algo = (fabric.hosts[0].env("NCCL_ALGO") or "").upper()
    return algo == "" or "TREE" in algo or "NVLS" in algo


def _peak(fabric: FabricConfig, op: CollectiveOp, net: float) -> float:
    """Return the large-message busbw from the network term ``net`` (already x f_route x f_cc)."""
    g, n = ranks(fabric)
    hosts = len(fabric.hosts)
    tree = op == "all_reduce" and _tree_allowed(fabric)
    if hosts == 1:
        return params.B_NVLS if tree else params.B_INTRA_RING
    if op == "alltoall":
        return min(params.B_INTRA_RING, net * (n - 1) / (g * (n - g)))
    if hosts == 2 and tree:
        nvls = params.NVLS_TREE_2NODE * params.B_NVLS
        return min(nvls, bus_factor(op, n) * net)
    return min(params.B_INTRA_RING, net)


def _socket_plan(fabric: FabricConfig, op: CollectiveOp) -> Plan:
    """Return the plan of a run that fell back to NCCL's socket transport."""
    net = min((socket_gbytes(h) for h in fabric.hosts), default=0.0)
    return Plan("Socket", gdr=False, channels=2, peak=_peak(fabric, op, net), rails=0, rho=1.0)


def plan(fabric: FabricConfig, op: CollectiveOp) -> Plan:
    """Return the size-independent part of a collective: transport, GDR, peak busbw.

    Args:
        fabric: the rack.
        op: the collective.

    Returns:
        The plan; ``failure`` is set when RoCE connections cannot come up.
    """
    return _plan(_Rack(fabric), op)


def _plan(hosts: _Rack, op: CollectiveOp, *, hops: bool = True) -> Plan:
    """:func:`plan` over an indexed rack (several collectives of one rack share its index);
    ``hops=False`` leaves out the class path of every hop (what only the counters read)."""
    fabric, rails = hosts.fabric, hosts.rails
    if rails == 0 or len(fabric.hosts) < 2:
        return _socket_plan(fabric, op) if len(fabric.hosts) > 1 else _local_plan(fabric, op)
    ib = link.is_ib(fabric.hosts[0].nics[hosts.hcas[0][0]])
    transport: Transport = "IB" if ib else "RoCE"
    failure = hosts.failure()
    gdr = all(_host_gdr(fabric.hosts[i], rails) for i in hosts.firsts)  # each kind of host once
    if failure is not None:
        return Plan(transport, gdr, 0, 0.0, rails, 1.0, (), failure)
    rho = 1.0 if ib else _overload(hosts, op)
    fcc = min(f_cc(cp, rho, collective=True) for cp in hosts.distinct.values())  # each class once
    net = min(_host_net(fabric.hosts[i], rails, op) for i in hosts.firsts) * _route(hosts, op, ib) * fcc
    chans = params.CHANNELS_PER_NIC * rails
    classes = tuple(hosts.classes()) if hops else ()
    return Plan(transport, gdr, chans, _peak(fabric, op, net), rails, rho, classes)


def failed_hops(fabric: FabricConfig) -> list[tuple[NicRef, NicRef, Failure]]:
    """Return every ring hop (sender NIC, receiver NIC) whose connection cannot come up, and why.

    The sender of such a hop is the rank whose work requests complete in error (nccl#1814: "Got
    completion from peer ... status=12 ... (Send)"); a host with a wrong GID fails its own sends
    and its ring predecessor's sends to it.
    """
    hosts = _Rack(fabric)
    if hosts.rails == 0 or len(fabric.hosts) < 2:
        return []
    out = []
    for a, b in hosts.ring_pairs():
        _, failure = hosts.connect(a, b)
        if failure is not None:
            out.append((a, b, failure))
    return out


def _local_plan(fabric: FabricConfig, op: CollectiveOp) -> Plan:
    """Return the plan of a single-node run (NVLink only, no network)."""
    transport: Transport = "IB" if fabric.hosts and fabric.hosts[0].nics else "Socket"
    return Plan(
        transport, gdr=False, channels=params.CHANNELS_PER_NIC, peak=_peak(fabric, op, 0.0), rails=0, rho=1.0
    )


def busbw_at(peak: float, size: int) -> float:
    """Return the noise-free bandwidth-term busbw at ``size``: peak / (1 + (S_half/S)^beta)."""
    if size <= 0:
        return 0.0
    return float(peak / (1.0 + (params.ROLL_OFF_HALF_BYTES / size) ** params.ROLL_OFF_EXP))


def latency_floor_us(n: int) -> float:
    """Return the small-message time floor of a collective over ``n`` ranks."""
    return params.LAT_BASE_US + params.LAT_PER_LOG2_RANK_US * math.log2(max(n, 2))


def _row(p: Plan, op: CollectiveOp, size: int, n: int, factor: float) -> SizeResult:
    """Return one nccl-tests row: noisy bandwidth term, plus latency, then algbw and busbw."""
    bf = bus_factor(op, n) or 1.0
    bw = noise.below(busbw_at(p.peak, size) * factor, p.peak)
    t_us = (size / (bw / bf * 1e9) * 1e6 if bw > 0 else math.inf) + latency_floor_us(n)
    algbw = size / (t_us * 1e-6) / 1e9
    return SizeResult(size, t_us, algbw, algbw * bf)


def _counters(hosts: _Rack, p: Plan, rows: Sequence[SizeResult], iters: int) -> dict[NicRef, Counters]:
    """Return counter deltas of a run: each ring hop carries its rail's share of busbw.

    Hops with the same class path from the same port move the same counts: computed once.
    """
    secs = sum(r.time_us for r in rows) * 1e-6 * iters
    busy = max((r.busbw for r in rows), default=0.0)
    fabric = hosts.fabric
    qps = hosts.qps()
    flows: dict[tuple[int, int, int], tuple[Counters, Counters]] = {}
    sums: dict[tuple[int, int], Counters] = {}  # the same two deltas add up to the same sum

    def add(ref: NicRef, delta: Counters) -> None:
        if ref not in out:
            out[ref] = delta
            return
        key = (id(out[ref]), id(delta))  # both held (by ``flows``, ``sums``) until the call returns
        if key not in sums:
            sums[key] = out[ref] + delta
        out[ref] = sums[key]

    out: dict[NicRef, Counters] = {}
    for a, b, cp in p.classes:
        key = (id(cp), hosts.kind[a[0]], a[1])  # the class path and the sending port
        if key not in flows:
            nic = fabric.hosts[a[0]].nics[a[1]]
            t = Traffic(busy * 8 / max(p.rails, 1), secs, link.active_mtu(nic), qps, nic.rate_gbps)
            flows[key] = flow_counters(cp, p.rho, t)
        tx, rx = flows[key]
        add(a, tx)
        add(b, rx)
    return out


def collective(
    fabric: FabricConfig,
    op: CollectiveOp,
    sizes: Sequence[int],
    run_index: int = 0,
    *,
    iters: int = 20,
    noisy: bool = True,
) -> CollectiveResult:
    """Run one nccl-tests collective over every host x GPU through the model.

    Args:
        fabric: the rack.
        op: all_reduce, all_gather, reduce_scatter or alltoall.
        sizes: message sizes in bytes (nccl-tests ``S``).
        run_index: which repetition (selects the noise).
        iters: timed iterations per size (``-n``), for counter deltas.
        noisy: False gives the noise-free expectation (calibration, oracle).

    Returns:
        A row per size, the transport, GDR use, channels and counter deltas; on a connection
        failure, no rows and ``failure`` set.
    """
    hosts = _Rack(fabric)
    p = _plan(hosts, op)
    if p.failure is not None:
        return CollectiveResult(op, (), p.transport, p.gdr, 0, {}, p.failure)
    _, n = ranks(fabric)
    rows = []
    for i, size in enumerate(sizes):
        rng = noise.rng_for(fabric.seed, run_index, 7_000_000 + i)
        jitter = noise.factor(rng, noise.cv_for_size(size)) if noisy else 1.0
        rows.append(_row(p, op, size, n, jitter))
    counters = _counters(hosts, p, rows, iters)
    return CollectiveResult(op, tuple(rows), p.transport, p.gdr, p.channels, counters)


def expected_busbw(fabric: FabricConfig, op: CollectiveOp, size: int) -> float:
    """Return the noise-free busbw at ``size`` (0 on failure): the oracle's objective."""
    return expected_busbws(fabric, (op,), size)[0]


def expected_busbws(fabric: FabricConfig, ops: Sequence[CollectiveOp], size: int) -> tuple[float, ...]:
    """Return :func:`expected_busbw` of each collective in ``ops``, the rack indexed once for all."""
    hosts = _Rack(fabric)
    _, n = ranks(fabric)
    out = []
    for op in ops:
        p = _plan(hosts, op, hops=False)
        out.append(0.0 if p.failure is not None else _row(p, op, size, n, 1.0).busbw)
    return tuple(out)
