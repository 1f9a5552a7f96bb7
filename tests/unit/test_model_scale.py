"""The model's indexed, shared computation gives exactly what a straightforward one gives.

``collective``, ``plan``, ``failed_hops`` and the oracle index the hosts once, compute what
identical hosts and hops share once, and remember configurations already scored. The reference
below is the plain form of the same equations: every ring hop, every host and every configuration
computed on its own (O(N^2) for the counters, as the model was). On small random racks, uniform
and mixed, with hosts that share objects and hosts that are equal copies, both must agree to the
last bit.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Sequence

import numpy as np
import pytest

from fabtune.sim.model import collective, expected_busbw, link, noise, params
from fabtune.sim.model.calibration import GIB, nic, rack
from fabtune.sim.model.collective import (
    Plan,
    _connect,
    _host_net,
    _local_plan,
    _peak,
    _row,
    _socket_plan,
    failed_hops,
    plan,
    ranks,
)
from fabtune.sim.model.config import CollectiveOp, FabricConfig, SmConfig
from fabtune.sim.model.congestion import Traffic, f_cc, flow_counters
from fabtune.sim.model.oracle import (
    ENGINES,
    GDR,
    GROUPS,
    QPS,
    RDMA_MTUS_ETH,
    TRUSTS,
    Knobs,
    _better,
    _env,
    _nic,
    apply,
    best_config,
    current_knobs,
)
from fabtune.sim.model.qos import ClassPath
from fabtune.sim.model.results import CollectiveResult, Counters, Failure, NicRef
from fabtune.sim.model.routing import (
    ecmp_prior,
    ib_ar_active,
    ib_route_eff,
    oversub_cap,
    roce_route_eff,
    spans_leaves,
)
from fabtune.sim.model.transport import gdr_used, usable_hcas

SIZES = [8, 2**20, 8 * GIB]
OPS: tuple[CollectiveOp, ...] = ("all_reduce", "alltoall", "all_gather")

# --------------------------------------------------------------------------- the reference


def ref_pairs(fabric: FabricConfig, rails: int) -> list[tuple[NicRef, NicRef]]:
    n = len(fabric.hosts)
    return [
        ((h, usable_hcas(fabric.hosts[h])[r]), ((h + 1) % n, usable_hcas(fabric.hosts[(h + 1) % n])[r]))
        for h in range(n)
        for r in range(rails)
    ]


def ref_plan(fabric: FabricConfig, op: CollectiveOp) -> Plan:
    rails = min((len(usable_hcas(h)) for h in fabric.hosts), default=0)
    if rails == 0 or len(fabric.hosts) < 2:
        return _socket_plan(fabric, op) if len(fabric.hosts) > 1 else _local_plan(fabric, op)
    ib = link.is_ib(fabric.hosts[0].nics[usable_hcas(fabric.hosts[0])[0]])
    classes: list[tuple[NicRef, NicRef, ClassPath]] = []
    failure: Failure | None = None
    for a, b in ref_pairs(fabric, rails):
        cp, failure = _connect(fabric, a, b)
        if failure is not None or cp is None:
            break
        classes.append((a, b, cp))
    gdr = all(gdr_used(h, h.nics[i]) for h in fabric.hosts for i in usable_hcas(h)[:rails])
    if failure is not None:
        return Plan("IB" if ib else "RoCE", gdr, 0, 0.0, rails, 1.0, (), failure)
    rho = 1.0 if ib else ref_overload(fabric, op)
    fcc = min(f_cc(cp, rho, collective=True) for _, _, cp in classes)
    net = min(_host_net(h, rails, op) for h in fabric.hosts) * ref_route(fabric, op, ib) * fcc
    peak = _peak(fabric, op, net)
    chans = params.CHANNELS_PER_NIC * rails
    return Plan("IB" if ib else "RoCE", gdr, chans, peak, rails, rho, tuple(classes))


def ref_qps(fabric: FabricConfig) -> int:
    return min((int(h.env("NCCL_IB_QPS_PER_CONNECTION") or 1) for h in fabric.hosts), default=1)


def ref_overload(fabric: FabricConfig, op: CollectiveOp) -> float:
    sw, rho = fabric.switch, 1.0
    if spans_leaves(fabric):
        hashed = 1 / params.F_ROUTE_AR if sw.adaptive_routing else 1 / ecmp_prior(sw.spines, ref_qps(fabric))
        rho = max(hashed, sw.oversubscription)
    if op == "alltoall" and len(fabric.hosts) > 2:
        rho = max(rho, params.ALLTOALL_INCAST)
    return rho


def ref_route(fabric: FabricConfig, op: CollectiveOp, ib: bool) -> float:
    if not spans_leaves(fabric):
        return 1.0
    if ib:
        host = fabric.hosts[0]
        ar = ib_ar_active(fabric, host.env("NCCL_IB_ADAPTIVE_ROUTING"), int(host.env("NCCL_IB_SL") or 0))
        eff = ib_route_eff(fabric, op, ar)
    else:
        eff = roce_route_eff(fabric, ref_qps(fabric))
    return min(eff, oversub_cap(fabric.switch))


def ref_collective(
    fabric: FabricConfig, op: CollectiveOp, sizes: Sequence[int], run: int
) -> CollectiveResult:
    p = ref_plan(fabric, op)
    if p.failure is not None:
        return CollectiveResult(op, (), p.transport, p.gdr, 0, {}, p.failure)
    _, n = ranks(fabric)
    rows = []
    for i, size in enumerate(sizes):
        rng = noise.rng_for(fabric.seed, run, 7_000_000 + i)
        rows.append(_row(p, op, size, n, noise.factor(rng, noise.cv_for_size(size))))
    secs = sum(r.time_us for r in rows) * 1e-6 * 20
    busy = max(r.busbw for r in rows)
    counters: dict[NicRef, Counters] = {}
    for a, b, cp in p.classes:
        port = fabric.hosts[a[0]].nics[a[1]]
        t = Traffic(busy * 8 / max(p.rails, 1), secs, link.active_mtu(port), ref_qps(fabric), port.rate_gbps)
        tx, rx = flow_counters(cp, p.rho, t)
        counters[a] = counters.get(a, Counters()) + tx
        counters[b] = counters.get(b, Counters()) + rx
    return CollectiveResult(op, tuple(rows), p.transport, p.gdr, p.channels, counters)


def ref_failed_hops(fabric: FabricConfig) -> list[tuple[NicRef, NicRef, Failure]]:
    rails = min((len(usable_hcas(h)) for h in fabric.hosts), default=0)
    if rails == 0 or len(fabric.hosts) < 2:
        return []
    found = ((a, b, _connect(fabric, a, b)[1]) for a, b in ref_pairs(fabric, rails))
    return [(a, b, failure) for a, b, failure in found if failure is not None]


def ref_busbw(fabric: FabricConfig, op: CollectiveOp, size: int) -> float:
    p = ref_plan(fabric, op)
    return 0.0 if p.failure is not None else _row(p, op, size, ranks(fabric)[1], 1.0).busbw


def ref_apply(fabric: FabricConfig, k: Knobs) -> FabricConfig:
    hosts = tuple(
        dataclasses.replace(h, nics=tuple(_nic(n, k) for n in h.nics), nccl_env=_env(h, k))
        for h in fabric.hosts
    )
    sm = dataclasses.replace(fabric.sm, routing_engine=k.routing_engine, adaptive_routing=k.ar)
    return dataclasses.replace(fabric, hosts=hosts, sm=sm if fabric.fabric == "ib" else fabric.sm)


def ref_best_config(fabric: FabricConfig) -> tuple[FabricConfig, float]:
    def key(k: Knobs) -> tuple[float, float]:
        cand = ref_apply(fabric, k)
        return ref_busbw(cand, "all_reduce", 8 * GIB), ref_busbw(cand, "alltoall", 8 * GIB)

    best = current_knobs(fabric)
    best_key = key(best)
    improved = True
    while improved:
        improved = False
        for group in GROUPS:
            for cand in group(fabric, best):
                cand_key = key(cand)
                if _better(cand_key, best_key):
                    best, best_key, improved = cand, cand_key, True
    return ref_apply(fabric, best), best_key[0]


# --------------------------------------------------------------------------- random racks


def random_knobs(rng: np.random.Generator) -> Knobs:
    return Knobs(
        trust=TRUSTS[rng.integers(2)], dscp=int(rng.integers(64)), prio=int(rng.integers(8)),
        ecn=bool(rng.integers(2)), cnp_prio=int(rng.integers(8)), cnp_dscp=int(rng.integers(64)),
        mtu=RDMA_MTUS_ETH[rng.integers(4)], qps=QPS[rng.integers(5)], gdr_level=GDR[rng.integers(5)],
        gid_index=int(rng.integers(-1, 5)), ib_enabled=bool(rng.integers(4) > 0),
        routing_engine=ENGINES[rng.integers(len(ENGINES))], ar=bool(rng.integers(2)),
    )  # fmt: skip


def random_rack(rng: np.random.Generator, hosts: int, mixed: bool) -> FabricConfig:
    """A rack of ``hosts`` (2 per leaf) whose hosts share their NICs and settings (uniform knobs);
    ``mixed``: two thirds of them equal copies (other objects), with an NCCL environment of their own
    or with knobs of their own."""
    kind = "ib" if rng.random() < 0.3 else "roce"
    port = nic(kind, dist=str(rng.choice(["PIX", "PHB", "SYS"])))  # type: ignore[arg-type]
    fab = rack(hosts, port, nics=int(rng.integers(1, 4)), gpus=int(rng.integers(1, 9)), leaf=2)
    sw = dataclasses.replace(fab.switch, adaptive_routing=bool(rng.integers(2)), l3=bool(rng.integers(2)))
    sm = SmConfig(str(rng.choice(ENGINES)), bool(rng.integers(2)))
    fab = apply(dataclasses.replace(fab, switch=sw, sm=sm, seed=int(rng.integers(100))), random_knobs(rng))
    if not mixed:
        return fab
    out = list(fab.hosts)
    for i in rng.permutation(hosts)[: 2 * hosts // 3]:
        if rng.random() < 0.4:
            out[i] = copy.deepcopy(out[i])
            continue
        if rng.random() < 0.3:  # its own nccl.conf: the same NIC objects, another GID index, ToS, GDR level
            env = {**dict(out[i].nccl_env), "NCCL_IB_GID_INDEX": str(rng.integers(-1, 5)),
                   "NCCL_IB_TC": str(rng.integers(256)), "NCCL_NET_GDR_LEVEL": GDR[rng.integers(5)]}
            out[i] = dataclasses.replace(out[i], nccl_env=tuple(sorted(env.items())))
            continue
        one = ref_apply(dataclasses.replace(fab, hosts=(out[i],)), random_knobs(rng)).hosts[0]
        out[i] = dataclasses.replace(one, gpus=int(rng.integers(1, 9))) if rng.random() < 0.3 else one
    return dataclasses.replace(fab, hosts=tuple(out))


@pytest.mark.parametrize("seed", range(6))
def test_collective_plan_and_failed_hops_equal_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for case in range(12):
        fab = random_rack(rng, int(rng.choice([1, 2, 3, 5, 6, 9])), mixed=case % 2 == 1)
        for op in OPS:
            assert plan(fab, op) == ref_plan(fab, op)
            assert collective(fab, op, SIZES, case) == ref_collective(fab, op, SIZES, case)
            assert expected_busbw(fab, op, 8 * GIB) == ref_busbw(fab, op, 8 * GIB)
        assert failed_hops(fab) == ref_failed_hops(fab)
        k = random_knobs(rng)
        assert apply(fab, k) == ref_apply(fab, k)


def test_the_counters_of_every_port_are_the_reference_sums() -> None:
    """The counters are where the model was O(N^2): a congested two-leaf rack with pause frames."""
    port = dataclasses.replace(nic(), ecn_np=(False,) * 8, ecn_rp=(False,) * 8)
    fab = rack(6, port, nics=2, leaf=2)
    res = collective(fab, "alltoall", [8 * GIB], 3)
    assert res == ref_collective(fab, "alltoall", [8 * GIB], 3)
    assert sum(sum(c.rx_pause) for c in res.counters.values()) > 0
    assert set(res.counters) == {(h, i) for h in range(6) for i in range(2)}


def test_a_host_with_its_own_nccl_conf_on_shared_ports_fails_its_hops() -> None:
    """Host 2 names the RoCEv1 GID (index 0) on ports it shares, as objects, with every other host:
    its own sends and its ring predecessor's sends to it time out (v1 never pairs with v2)."""
    fab = rack(5, nic(), nics=2)
    hosts = list(fab.hosts)
    hosts[2] = dataclasses.replace(hosts[2], nccl_env=(*hosts[2].nccl_env, ("NCCL_IB_GID_INDEX", "0")))
    fab = dataclasses.replace(fab, hosts=tuple(hosts))
    assert failed_hops(fab) == ref_failed_hops(fab)
    assert {(a[0], b[0]) for a, b, _ in failed_hops(fab)} == {(1, 2), (2, 3)}
    assert collective(fab, "all_reduce", SIZES, 0) == ref_collective(fab, "all_reduce", SIZES, 0)


@pytest.mark.parametrize("seed,kind", [(0, "roce"), (1, "ib"), (2, "roce")])
def test_the_oracle_finds_what_a_plain_search_finds(seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    port = dataclasses.replace(nic(kind, mtu=1500 if kind == "roce" else 2048), ecn_np=(False,) * 8)
    fab = rack(3, port, nics=1, gpus=2, leaf=2, env=(("NCCL_NET_GDR_LEVEL", "LOC"),))
    fab = dataclasses.replace(fab, sm=SmConfig("minhop"), switch=dataclasses.replace(
        fab.switch, pfc=tuple(i == 5 for i in range(8)), ecn=tuple(i == 5 for i in range(8))))
    if seed == 2:  # equal hosts as distinct objects (a testbed read from its hosts), one other GPU count
        hosts = [copy.deepcopy(h) for h in fab.hosts]
        hosts[int(rng.integers(3))] = dataclasses.replace(hosts[0], name="odd", gpus=1)
        fab = dataclasses.replace(fab, hosts=tuple(hosts))
    best, value = best_config(fab)
    assert (best, value) == ref_best_config(fab)
    assert value > expected_busbw(fab, "all_reduce", 8 * GIB)


def test_the_module_keeps_no_state_between_calls() -> None:
    """Per-call indexes only: a rack built after another (ids may be reused) gets its own answer."""
    first = collective(rack(4, nic(), nics=2), "all_reduce", [8 * GIB], 0, noisy=False)
    slow = collective(rack(4, nic(mtu=1500), nics=2), "all_reduce", [8 * GIB], 0, noisy=False)
    assert slow.rows[0].busbw < first.rows[0].busbw
    for name in ("collective", "oracle"):
        module = importlib.import_module(f"fabtune.sim.model.{name}")
        assert not [k for k, v in vars(module).items() if isinstance(v, dict) and k[:1] == "_" != k[1:2]]
