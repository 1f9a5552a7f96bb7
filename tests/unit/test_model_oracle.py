"""The oracle searches the knob space; nothing a random search finds beats it."""

from __future__ import annotations

import dataclasses

import numpy as np

from fabtune.sim.model import Knobs, best_config, expected_busbw, p2p, score
from fabtune.sim.model.calibration import GIB, MIB, nic, rack
from fabtune.sim.model.config import Flow, SmConfig
from fabtune.sim.model.oracle import ENGINES, GDR, QPS, RDMA_MTUS_ETH, TRUSTS

PRIO5 = tuple(i == 5 for i in range(8))


def _misconfigured_roce(hosts: int) -> object:
    """Switch lossless on priority 5 (ECN too); hosts on 3 with MTU 1500 and GDR off."""
    port = dataclasses.replace(nic(dist="PXB", mtu=1500), ecn_np=(False,) * 8)
    fab = rack(hosts, port, nics=2, gpus=2, env=(("NCCL_NET_GDR_LEVEL", "LOC"), ("NCCL_IB_TC", "106")))
    sw = dataclasses.replace(fab.switch, pfc=PRIO5, ecn=PRIO5)
    return dataclasses.replace(fab, switch=sw)


def _random_knobs(rng: np.random.Generator) -> Knobs:
    return Knobs(
        trust=TRUSTS[rng.integers(2)], dscp=int(rng.integers(64)), prio=int(rng.integers(8)),
        ecn=bool(rng.integers(2)), cnp_prio=int(rng.integers(8)), cnp_dscp=int(rng.integers(64)),
        mtu=RDMA_MTUS_ETH[rng.integers(4)], qps=QPS[rng.integers(4)], gdr_level=GDR[rng.integers(5)],
        gid_index=int(rng.integers(-1, 4)), ib_enabled=bool(rng.integers(2)),
        routing_engine=ENGINES[rng.integers(len(ENGINES))], ar=bool(rng.integers(2)),
    )  # fmt: skip


def test_oracle_beats_every_random_config_roce_two_leaves() -> None:
    fab = _misconfigured_roce(34)
    best, value = best_config(fab)  # type: ignore[arg-type]
    start = expected_busbw(fab, "all_reduce", 8 * GIB)  # type: ignore[arg-type]
    assert value > 2 * start
    assert expected_busbw(best, "all_reduce", 8 * GIB) == value
    rng = np.random.default_rng(7)
    tried = [score(fab, _random_knobs(rng)) for _ in range(150)]  # type: ignore[arg-type]
    assert value >= max(tried)


def test_oracle_finds_the_switch_lossless_class() -> None:
    best, _ = best_config(_misconfigured_roce(4))  # type: ignore[arg-type]
    port = best.hosts[0].nics[0]
    tos = int(best.hosts[0].env("NCCL_IB_TC") or 0)
    assert best.switch.dscp2prio[tos >> 2] == 5
    assert port.pfc[5]
    assert port.mtu >= 4200
    flows = [Flow(i, 0, msg_size=MIB, qps=8, tclass=tos) for i in (1, 2, 3)]
    fair = 392.1 / 3
    assert all(r.goodput_gbps > 0.95 * fair for r in p2p(best, flows, noisy=False).results)


def test_oracle_turns_on_ib_adaptive_routing() -> None:
    fab = dataclasses.replace(rack(40, nic("ib"), nics=2, gpus=2), sm=SmConfig("minhop", flavor="mlnx"))
    best, value = best_config(fab)
    assert best.sm.adaptive_routing
    assert best.sm.routing_engine.startswith("ar_")
    rng = np.random.default_rng(3)
    assert all(value >= score(fab, _random_knobs(rng)) for _ in range(60))


def test_oracle_has_no_adaptive_routing_with_upstream_opensm() -> None:
    """Issue 13: upstream opensm has no ar_* engine, so the best reachable config routes without AR."""
    fab = dataclasses.replace(rack(40, nic("ib"), nics=2, gpus=2), sm=SmConfig("minhop"))
    best, value = best_config(fab)
    assert not best.sm.adaptive_routing and not best.sm.routing_engine.startswith("ar_")
    nvidia, ar_value = best_config(dataclasses.replace(fab, sm=SmConfig("minhop", flavor="mlnx")))
    assert nvidia.sm.adaptive_routing and ar_value >= value
