"""Lossless class, PFC, ECN/DCQCN, incast, GIDs and the counters they move."""

from __future__ import annotations

import dataclasses

from fabtune.sim.model import Flow, NicConfig, ceiling_gbps, collective, incast, p2p
from fabtune.sim.model.calibration import MIB, TUNED_SWITCH, nic, rack

OFF = (False,) * 8
PRIO4 = tuple(i == 4 for i in range(8))


def _big(**kw: object) -> Flow:
    return dataclasses.replace(Flow(0, 1, msg_size=MIB, qps=8, tclass=106), **kw)  # type: ignore[arg-type]


def _wrong_pfc() -> NicConfig:
    """PFC on priority 4 while ToS 106 (DSCP 26) maps to priority 3; no ECN."""
    return dataclasses.replace(nic(), pfc=PRIO4, ecn_np=OFF, ecn_rp=OFF)


def test_wrong_pfc_priority_3_to_1_incast_collapses() -> None:
    fab = rack(4, _wrong_pfc(), nics=1)
    run = p2p(fab, incast([1, 2, 3], 0, _big()), 0)
    fair = ceiling_gbps(nic()) / 3
    assert all(r.goodput_gbps < 0.25 * fair for r in run.results)
    assert run.counters[(0, 0)].out_of_sequence > 0


def test_wrong_pfc_priority_point_to_point_barely_suffers() -> None:
    fab = rack(2, _wrong_pfc(), nics=1)
    res = p2p(fab, [_big()], noisy=False).results[0]
    assert res.goodput_gbps >= 0.99 * ceiling_gbps(nic())


def test_lossless_incast_shares_fairly() -> None:
    fab = rack(4, nic(), nics=1)
    run = p2p(fab, incast([1, 2, 3], 0, _big()), noisy=False)
    fair = ceiling_gbps(nic()) / 3
    assert all(abs(r.goodput_gbps - fair) < 0.01 * fair for r in run.results)
    assert run.counters[(0, 0)].np_cnp_sent > 0
    assert run.counters[(1, 0)].rp_cnp_handled > 0


def test_pfc_only_incast_pauses_and_loses_throughput() -> None:
    port = dataclasses.replace(nic(), ecn_np=OFF, ecn_rp=OFF)
    fab = dataclasses.replace(rack(4, port, nics=1), switch=dataclasses.replace(TUNED_SWITCH, ecn=OFF))
    run = p2p(fab, incast([1, 2, 3], 0, _big()), noisy=False)
    assert all(run.counters[(s, 0)].rx_pause[3] > 0 for s in (1, 2, 3))
    assert run.counters[(0, 0)].np_cnp_sent == 0
    total = sum(r.goodput_gbps for r in run.results)
    assert 0.8 * ceiling_gbps(port) < total < 0.95 * ceiling_gbps(port)


def test_pfc_only_head_of_line_blocks_a_victim_flow() -> None:
    port = dataclasses.replace(nic(), ecn_np=OFF, ecn_rp=OFF)
    fab = dataclasses.replace(rack(5, port, nics=1), switch=dataclasses.replace(TUNED_SWITCH, ecn=OFF))
    flows = [*incast([1, 2, 3], 0, _big()), _big(src_host=1, dst_host=4)]
    run = p2p(fab, flows, noisy=False)
    assert run.results[3].goodput_gbps < 0.5 * ceiling_gbps(port)


def test_trust_pcp_puts_untagged_roce_in_priority_0() -> None:
    port = dataclasses.replace(nic(), trust="pcp")
    fab = rack(4, port, nics=1)
    run = p2p(fab, incast([1, 2], 0, _big()), noisy=False)
    fair = ceiling_gbps(port) / 2
    assert all(r.goodput_gbps < 0.3 * fair for r in run.results)


def test_dcqcn_softens_a_lossy_incast() -> None:
    lossy_cc = dataclasses.replace(nic(), pfc=PRIO4)
    no_cc = _wrong_pfc()
    fair = ceiling_gbps(nic()) / 3
    with_cc = p2p(rack(4, lossy_cc, nics=1), incast([1, 2, 3], 0, _big()), noisy=False).results
    without = p2p(rack(4, no_cc, nics=1), incast([1, 2, 3], 0, _big()), noisy=False).results
    assert with_cc[0].goodput_gbps > 2 * without[0].goodput_gbps
    assert with_cc[0].goodput_gbps < fair


def test_roce_v1_and_link_local_gids_time_out_across_l3() -> None:
    fab = rack(40, nic(), nics=1)
    for gid in (0, 1, 2):
        assert p2p(fab, [_big(dst_host=35, gid_index=gid)]).results[0].failure == "timeout"
    assert p2p(fab, [_big(dst_host=35, gid_index=3)]).results[0].failure is None
    assert p2p(fab, [_big(dst_host=1, gid_index=2)]).results[0].failure is None


def test_gid_index_out_of_table_fails() -> None:
    fab = rack(2, nic(), nics=1)
    assert p2p(fab, [_big(gid_index=7)]).results[0].failure == "invalid_gid"


def test_rdma_cm_with_roce_v1_mode_times_out_across_l3() -> None:
    fab = rack(40, dataclasses.replace(nic(), roce_mode=1), nics=1)
    assert p2p(fab, [_big(dst_host=35, rdma_cm=True)]).results[0].failure == "timeout"


def test_nccl_gid_index_0_across_leaves_fails_collective() -> None:
    fab = rack(40, nic(), nics=1, gpus=1, env=(("NCCL_IB_GID_INDEX", "0"),))
    res = collective(fab, "all_reduce", [MIB])
    assert res.failure == "timeout"
    assert res.rows == ()
