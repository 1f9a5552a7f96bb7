"""VLAN-tagged RoCE in the model: the PCP a connection's frames carry (verbs SL, rdma_cm ToS through
the VLAN device's egress-qos-map), the class it lands in under PCP and DSCP trust, the tag's bytes."""

from __future__ import annotations

import dataclasses

import pytest

from fabtune.sim.model import expected_busbw, p2p
from fabtune.sim.model.calibration import GIB, TUNED_ENV, nic, rack
from fabtune.sim.model.config import FabricConfig, Flow, GidEntry, NicConfig
from fabtune.sim.model.link import ceiling_gbps, header_bytes
from fabtune.sim.model.qos import class_path, rt_tos2priority, tag_pcp
from fabtune.sim.model.transport import resolve_gid, with_gid
from fabtune.sim.observe import nic_from_json, to_json

VLAN = 100
# The testbed's table of a VLAN port: its own link-local GIDs untagged, then the VLAN device's.
VLAN_GIDS = (
    GidEntry("v1", "link-local"),
    GidEntry("v2", "link-local"),
    GidEntry("v1", "link-local", VLAN),
    GidEntry("v2", "link-local", VLAN),
    GidEntry("v1", "ipv4", VLAN),
    GidEntry("v2", "ipv4", VLAN),
)


def _pcp_rack(hosts: int = 4, *, gids: tuple[GidEntry, ...] = VLAN_GIDS, trust: str = "pcp",
              env: tuple[tuple[str, str], ...] = TUNED_ENV, egress: tuple[int, ...] = (0,) * 8,
              ) -> FabricConfig:
    """A rack whose NICs and switches trust ``trust`` with PFC and ECN on priority 3."""
    port = dataclasses.replace(nic(), trust=trust, gids=gids, egress_qos_map=egress)  # type: ignore[arg-type]
    fab = rack(hosts, port, env=env)
    return dataclasses.replace(fab, switch=dataclasses.replace(fab.switch, trust=trust))  # type: ignore[arg-type]


def _env(sl: int) -> tuple[tuple[str, str], ...]:
    return (*TUNED_ENV, ("NCCL_IB_SL", str(sl)))


def test_rt_tos2priority_follows_the_kernel_table() -> None:
    # net/ipv4/route.c ip_tos2prio: 0x00 best effort, 0x08 bulk, 0x10 interactive, 0x18 int. bulk
    assert [rt_tos2priority(t) for t in (0, 0x02, 0x08, 0x10, 0x18)] == [0, 0, 2, 6, 4]
    assert rt_tos2priority(106) == 2  # DSCP 26 | ECT(0): IPTOS_TOS(0x6a) = 0x0a -> bulk
    assert rt_tos2priority(0xB8) == 4  # DSCP 46 (EF)


def test_tag_pcp_is_the_sl_on_verbs_and_the_egress_map_on_rdma_cm() -> None:
    port = NicConfig(egress_qos_map=(1, 0, 3, 0, 0, 0, 5, 0))
    assert tag_pcp(port, sl=3, tos=0, rdma_cm=False) == 3
    assert tag_pcp(port, sl=11, tos=0, rdma_cm=False) == 3  # mlx5: SL & 7 on RoCE
    assert tag_pcp(port, sl=7, tos=106, rdma_cm=True) == 3  # ToS 106 -> skb prio 2 -> PCP 3
    assert tag_pcp(port, sl=7, tos=0, rdma_cm=True) == 1
    assert tag_pcp(port, sl=7, tos=0x10, rdma_cm=True) == 5


def test_only_a_vlan_gid_tags_and_adds_the_tag_bytes() -> None:
    port = dataclasses.replace(nic(), gids=VLAN_GIDS)
    untagged = with_gid(port, resolve_gid(port, 1), sl=3)
    tagged = with_gid(port, resolve_gid(port, None), sl=3)  # automatic choice: v2 IPv4, index 5
    assert resolve_gid(port, None) == VLAN_GIDS[5]
    assert (untagged.vlan_pcp, tagged.vlan_pcp) == (None, 3)
    assert header_bytes(tagged) == header_bytes(untagged) + 4
    assert ceiling_gbps(tagged) < ceiling_gbps(untagged)


def test_pcp_trust_puts_tagged_traffic_on_its_pcp() -> None:
    port = dataclasses.replace(nic(), trust="pcp", gids=VLAN_GIDS)
    fab = _pcp_rack()
    for sl, lossless in ((3, True), (0, False), (4, False)):
        tx = with_gid(port, VLAN_GIDS[5], sl=sl, tos=106)
        rx = with_gid(port, VLAN_GIDS[5], sl=sl, tos=106)
        cp = class_path(tx, rx, fab.switch, 106)
        assert (cp.tx_prio, cp.sw_prio, cp.rx_prio) == (sl, sl, sl)
        assert cp.lossless is lossless


def test_the_receiver_classifies_the_senders_tag() -> None:
    fab = _pcp_rack()
    port = dataclasses.replace(nic(), trust="pcp", gids=VLAN_GIDS)
    tx = with_gid(port, VLAN_GIDS[5], sl=3)
    rx = with_gid(port, VLAN_GIDS[5], sl=0)  # its own frames would carry PCP 0
    assert class_path(tx, rx, fab.switch, 0).rx_prio == 3


def test_nccl_ib_sl_moves_all_reduce_onto_the_lossless_priority_under_pcp_trust() -> None:
    lossless = expected_busbw(_pcp_rack(env=_env(3)), "all_reduce", 8 * GIB)
    lossy = expected_busbw(_pcp_rack(env=_env(0)), "all_reduce", 8 * GIB)
    unset = expected_busbw(_pcp_rack(), "all_reduce", 8 * GIB)
    assert lossless > lossy * 1.03
    assert unset == lossy  # NCCL_IB_SL defaults to 0


def test_nccl_ib_sl_does_nothing_on_untagged_roce() -> None:
    plain = (GidEntry("v1", "link-local"), GidEntry("v2", "link-local"),
             GidEntry("v1", "ipv4"), GidEntry("v2", "ipv4"))
    sl3 = expected_busbw(_pcp_rack(gids=plain, env=_env(3)), "all_reduce", 8 * GIB)
    sl0 = expected_busbw(_pcp_rack(gids=plain, env=_env(0)), "all_reduce", 8 * GIB)
    assert sl3 == sl0
    tagged = expected_busbw(_pcp_rack(env=_env(3)), "all_reduce", 8 * GIB)
    assert tagged > sl3


def test_dscp_trust_ignores_the_tag_but_pays_its_bytes() -> None:
    # NCCL_IB_TC 106 is DSCP 26 -> priority 3 (PFC on) whatever the SL puts in the tag
    tagged = [expected_busbw(_pcp_rack(trust="dscp", env=_env(sl)), "all_reduce", 8 * GIB) for sl in (0, 3)]
    assert tagged[0] == tagged[1]
    fab = _pcp_rack(trust="dscp", env=_env(0))
    port = fab.hosts[0].nics[0]
    tx = with_gid(port, VLAN_GIDS[5], sl=0, tos=106)
    assert class_path(tx, tx, fab.switch, 106).lossless
    assert tx.vlan_pcp == 0 and header_bytes(tx) == 86


def test_rdma_cm_flows_take_the_pcp_from_the_egress_map() -> None:
    """perftest -R: the ToS's skb priority through the VLAN device's egress-qos-map."""
    mapped = _pcp_rack(egress=(0, 0, 3, 0, 0, 0, 0, 0))  # skb priority 2 (ToS 106) -> PCP 3
    plain = _pcp_rack()
    single = [Flow(0, 1, msg_size=1 << 20, qps=4, tclass=106, rdma_cm=True)]
    three = _pcp_rack(3, egress=(0, 0, 3, 0, 0, 0, 0, 0))
    flows = [Flow(0, 2, msg_size=1 << 20, qps=4, tclass=106, rdma_cm=True),
             Flow(1, 2, msg_size=1 << 20, qps=4, tclass=106, rdma_cm=True)]
    lossless = sum(r.goodput_gbps for r in p2p(three, flows, noisy=False).results)
    lossy = sum(r.goodput_gbps for r in p2p(_pcp_rack(3), flows, noisy=False).results)
    assert lossless > 2 * lossy  # a 2:1 incast collapses outside the lossless class
    assert p2p(mapped, single, noisy=False).results[0].goodput_gbps == pytest.approx(
        p2p(plain, single, noisy=False).results[0].goodput_gbps)  # no congestion: no difference


def test_vlan_gids_and_egress_map_survive_the_json_exchange() -> None:
    port = dataclasses.replace(nic(), gids=VLAN_GIDS, egress_qos_map=(0, 0, 3, 0, 0, 0, 0, 0))
    assert nic_from_json(to_json(port)) == port
