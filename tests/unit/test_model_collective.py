"""nccl-tests collectives: busbw math, the cluster-size knee, GDR/affinity, TCP fallback, noise."""

from __future__ import annotations

import dataclasses

import pytest

from fabtune.sim.model import ceiling_gbps, collective, expected_busbw
from fabtune.sim.model.calibration import GIB, MIB, TUNED_ENV, nic, rack
from fabtune.sim.model.config import NicConfig, SmConfig

SIZES = [2**k for k in range(3, 34, 2)]


def _bw(fab: object, op: str = "all_reduce") -> float:
    return expected_busbw(fab, op, 8 * GIB)  # type: ignore[arg-type]


def test_busbw_and_algbw_follow_nccl_tests_factors() -> None:
    fab = rack(4, nic())
    n = 32
    for op, factor in (
        ("all_reduce", 2 * (n - 1) / n),
        ("all_gather", (n - 1) / n),
        ("alltoall", (n - 1) / n),
    ):
        res = collective(fab, op, SIZES, 0)  # type: ignore[arg-type]
        for row in res.rows:
            assert row.busbw == pytest.approx(row.algbw * factor)
            assert row.algbw == pytest.approx(row.size / (row.time_us * 1e-6) / 1e9)


def test_ring_busbw_bounded_by_rails() -> None:
    for port in (nic(), nic(rate=200.0), nic("ib", 100.0)):
        fab = rack(4, port)
        bound = 8 * ceiling_gbps(port) / 8
        for run in range(10):
            res = collective(fab, "all_reduce", [8 * GIB], run)
            assert res.rows[0].busbw <= bound
            assert res.transport in ("RoCE", "IB")


def test_busbw_grows_with_size_and_small_sizes_are_latency_bound() -> None:
    rows = collective(rack(4, nic()), "all_reduce", SIZES, noisy=False).rows
    bws = [r.busbw for r in rows]
    assert bws == sorted(bws)
    assert rows[0].time_us > 10.0
    assert bws[0] < 0.001 * bws[-1]


def test_knee_at_one_leaf_roce_untuned_degrades_ib_ar_holds() -> None:
    roce, ib = nic(), nic("ib")
    ar = SmConfig("ar_updn", adaptive_routing=True)
    for n in (4, 16, 32):
        assert _bw(rack(n, roce)) == pytest.approx(_bw(rack(n, ib)), rel=0.02)
    roce_drop = _bw(rack(64, roce)) / _bw(rack(32, roce))
    ib_drop = _bw(dataclasses.replace(rack(64, ib), sm=ar)) / _bw(rack(32, ib))
    assert roce_drop < 0.65
    assert ib_drop > 0.9


def test_more_qps_per_connection_average_out_ecmp_collisions() -> None:
    def bw(qps: int) -> float:
        return _bw(rack(64, nic(), env=(*TUNED_ENV, ("NCCL_IB_QPS_PER_CONNECTION", str(qps)))))

    assert bw(1) < bw(2) < bw(4) < bw(8)
    assert bw(1) == pytest.approx(_bw(rack(32, nic())) * 0.55, rel=0.05)


def test_ib_static_routing_below_ar_beyond_one_leaf() -> None:
    fab = rack(64, nic("ib"))
    static = _bw(dataclasses.replace(fab, sm=SmConfig("minhop")))
    ftree = _bw(dataclasses.replace(fab, sm=SmConfig("ftree")))
    ar = _bw(dataclasses.replace(fab, sm=SmConfig("ar_updn", adaptive_routing=True)))
    assert static < ftree <= ar
    assert expected_busbw(
        dataclasses.replace(fab, sm=SmConfig("ftree")), "alltoall", 8 * GIB
    ) < expected_busbw(
        dataclasses.replace(fab, sm=SmConfig("ar_updn", adaptive_routing=True)), "alltoall", 8 * GIB
    )


def test_lossy_class_collapses_collectives_only_with_congestion() -> None:
    wrong = dataclasses.replace(
        nic(), pfc=tuple(i == 4 for i in range(8)), ecn_np=(False,) * 8, ecn_rp=(False,) * 8
    )
    one_leaf = _bw(rack(8, wrong)) / _bw(rack(8, nic()))
    two_leaves = _bw(rack(64, wrong)) / _bw(rack(64, nic()))
    assert one_leaf == pytest.approx(0.95, abs=0.03)
    assert two_leaves < 0.25


def _one_rail(dist: str, level: str | None, gdr: bool = True) -> float:
    port: NicConfig = dataclasses.replace(nic(dist=dist), gdr=gdr)  # type: ignore[arg-type]
    env = TUNED_ENV + ((("NCCL_NET_GDR_LEVEL", level),) if level else ())
    return _bw(rack(4, port, nics=1, gpus=1, env=env))


def test_gdr_and_affinity_penalties() -> None:
    pix = _one_rail("PIX", None)
    assert _one_rail("PIX", "LOC") == pytest.approx(0.83 * pix, rel=0.01)
    assert _one_rail("PIX", None, gdr=False) == pytest.approx(0.83 * pix, rel=0.01)
    assert _one_rail("SYS", "SYS") == pytest.approx(0.5 * pix, rel=0.01)
    assert _one_rail("SYS", None) > _one_rail("SYS", "SYS")
    assert _one_rail("NODE", None) < pix
    res = collective(rack(4, nic(dist="SYS"), nics=1, gpus=1), "all_reduce", [MIB])
    assert res.gdr is False
    assert collective(rack(4, nic(), nics=1, gpus=1), "all_reduce", [MIB]).gdr is True


@pytest.mark.parametrize(
    "env",
    [
        (("NCCL_IB_DISABLE", "1"),),
        (("NCCL_IB_HCA", "mlx5_9"),),
        (("NCCL_IB_HCA", "^mlx5"),),
    ],
)
def test_tcp_fallback(env: tuple[tuple[str, str], ...]) -> None:
    fab = rack(4, nic(), env=env)
    res = collective(fab, "all_reduce", [8 * GIB], noisy=False)
    assert res.transport == "Socket"
    assert res.gdr is False
    assert res.rows[0].busbw <= 0.6 * 50 / 8


def test_socket_ifname_selects_the_rdma_netdevs() -> None:
    fab = rack(4, nic(), nics=2, env=(("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", "=eth2,eth3")))
    assert _bw(fab) == pytest.approx(min(370.0, 0.5 * 400 * 2 / 8), rel=0.05)


def test_mtu_monotonic_for_collectives() -> None:
    bws = [_bw(rack(4, nic(rate=200.0, mtu=m), nics=1, gpus=1)) for m in (1500, 2200, 4200)]
    assert bws == sorted(bws)


def test_two_nodes_default_algo_uses_nvls_tree_ring_does_not() -> None:
    tree = _bw(rack(2, nic("ib")))
    ring = _bw(rack(2, nic("ib"), env=(("NCCL_ALGO", "Ring"),)))
    assert tree > 450
    assert ring < 370.5


def test_same_seed_and_run_is_deterministic_other_run_differs() -> None:
    fab = rack(4, nic())
    a = collective(fab, "all_reduce", SIZES, 3)
    b = collective(fab, "all_reduce", SIZES, 3)
    c = collective(fab, "all_reduce", SIZES, 4)
    assert a == b
    assert [r.busbw for r in a.rows] != [r.busbw for r in c.rows]
    other_seed = collective(dataclasses.replace(fab, seed=99), "all_reduce", SIZES, 3)
    assert [r.busbw for r in a.rows] != [r.busbw for r in other_seed.rows]


def test_noise_matches_calibrated_cv() -> None:
    fab = rack(4, nic())
    vals = [collective(fab, "all_reduce", [8 * GIB], r).rows[0].busbw for r in range(400)]
    med = sorted(vals)[len(vals) // 2]
    spread = sorted(abs(v - med) / med for v in vals)[len(vals) // 2]
    assert 0.005 < spread < 0.03
    assert min(vals) < 0.92 * med


def test_repeated_runs_of_one_configuration_differ() -> None:
    """Issue 13.6: noise near the bandwidth ceiling is reflected below it, not clipped onto it."""
    fab = rack(4, nic(), env=TUNED_ENV)
    busbw = [round(collective(fab, "all_reduce", [8 * GIB], run).rows[0].busbw, 2) for run in range(10)]
    assert len(set(busbw)) == len(busbw), busbw


def test_an_sl_the_sm_maps_to_vl15_never_arrives() -> None:
    """opensm's QoS doc section 7: VL15 in the SL2VL table drops the SL."""
    import dataclasses as dc

    from fabtune.sim.model.calibration import nic, rack
    from fabtune.sim.model.collective import expected_busbw
    from fabtune.sim.model.config import Flow
    from fabtune.sim.model.p2p import p2p

    drop3 = (0, 1, 2, 15) + (0,) * 12
    fab = rack(2, nic("ib"), nics=1, gpus=1)
    fab = dc.replace(fab, sm=dc.replace(fab.sm, qos=True, sl2vl=drop3))
    on_sl3 = dc.replace(fab, hosts=tuple(dc.replace(h, nccl_env=(("NCCL_IB_SL", "3"),)) for h in fab.hosts))
    assert expected_busbw(fab, "all_reduce", 2**30) > 0
    assert expected_busbw(on_sl3, "all_reduce", 2**30) == 0
    assert p2p(fab, [Flow(0, 1, sl=3)], noisy=False).results[0].failure == "timeout"
    assert p2p(fab, [Flow(0, 1)], noisy=False).results[0].failure is None
    no_qos = dc.replace(on_sl3, sm=dc.replace(on_sl3.sm, qos=False))
    assert expected_busbw(no_qos, "all_reduce", 2**30) > 0
