"""NCCL_IB_SL on VLAN-tagged RoCE: the plan couples it to the lossless class where the facts show the
RoCEv2 GID on a VLAN device (its SL & 7 is the PCP of NCCL's frames), never on untagged RoCE; the
model's oracle reaches the lossless class on a rack whose switches classify by PCP."""

from __future__ import annotations

import dataclasses
from typing import Any

from fabtune.knobs import LosslessClass, View, lossless_change, plan
from fabtune.sim.model import best_config, expected_busbw
from fabtune.sim.model.calibration import GIB, nic, rack
from fabtune.sim.model.config import GidEntry
from fabtune.tune.hosts import host_groups, vlan_tagged
from tests.unit.test_tune_loop import FACTORY

V2_IPV4 = "0000:0000:0000:0000:0000:ffff:0a4e:010b"
LINK_LOCAL = "fe80:0000:0000:0000:0000:0aff:fe4e:0000"


def _port(netdev: str, ndev: str, index: int = 5) -> dict[str, Any]:
    gids = [{"index": 0, "gid": LINK_LOCAL, "type": "IB/RoCE v1", "netdev": netdev},
            {"index": index, "gid": V2_IPV4, "type": "RoCE v2", "netdev": ndev}]
    return {"dev": "mlx5_0", "port": 1, "netdev": netdev, "link_layer": "Ethernet",
            "gids": gids, "roce_v2_gid_index": index}


def _facts(ndev: str, nccl: dict[str, str] | None = None) -> dict[str, Any]:
    return {"hardware": {"ports": [_port("eth2", ndev)]}, "nics": {"eth2": dict(FACTORY)},
            "nccl": nccl or {}}


def test_vlan_tagged_reads_the_netdev_of_the_rocev2_gid() -> None:
    assert vlan_tagged(_port("eth2", "eth2.100"))
    assert not vlan_tagged(_port("eth2", "eth2"))
    assert not vlan_tagged(_port("eth2", "eth20"))  # another port, not a VLAN device of eth2
    assert not vlan_tagged(_port("eth2", "eth2.x"))
    assert not vlan_tagged({"netdev": "eth2", "roce_v2_gid_index": None, "gids": []})


def _view(tagged: bool, lossless: LosslessClass | None = None, nccl: dict[str, str] | None = None) -> View:
    return View("roce", dict(FACTORY), nccl or {}, {}, 5, 2, "PIX", lossless=lossless, vlan_tagged=tagged)


def test_the_lossless_move_sets_nccl_ib_sl_only_on_a_tagged_rack() -> None:
    for lossless in (None, LosslessClass(priority=4, dscp=34)):
        tagged = plan(_view(True, lossless))[0]
        plain = plan(_view(False, lossless))[0]
        assert all(m.group == "lossless" for m in tagged + plain)
        for move in tagged:
            assert move.change.nccl["NCCL_IB_SL"] == str(move.change.nic["pfc"][0])
        assert all("NCCL_IB_SL" not in m.change.nccl for m in plain)


def test_a_tagged_rack_without_the_sl_still_has_a_lossless_move() -> None:
    declared = LosslessClass(priority=3, dscp=26)
    change = lossless_change(3, tagged=True)
    runs = dataclasses.replace(_view(True, declared), nic={**FACTORY, **change.nic})
    without_sl = dataclasses.replace(runs, nccl={"NCCL_IB_TC": change.nccl["NCCL_IB_TC"]})
    assert plan(without_sl)[0][0].group == "lossless"
    assert plan(dataclasses.replace(runs, nccl=dict(change.nccl)))[0][0].group != "lossless"


def test_host_groups_tell_tagged_hosts_apart() -> None:
    facts = {"h01": _facts("eth2.100"), "h02": _facts("eth2.100"), "h03": _facts("eth2")}
    groups = host_groups(facts, "roce")
    assert [(g.hosts, g.views[0].vlan_tagged) for g in groups] == [(("h01", "h02"), True), (("h03",), False)]


def test_the_oracle_reaches_the_lossless_class_of_a_pcp_switch_over_a_vlan() -> None:
    gids = (GidEntry("v1", "link-local"), GidEntry("v2", "link-local"),
            GidEntry("v1", "ipv4", 100), GidEntry("v2", "ipv4", 100))
    port = dataclasses.replace(nic(), trust="pcp", gids=gids)
    fab = rack(4, port)
    fab = dataclasses.replace(fab, switch=dataclasses.replace(fab.switch, trust="pcp"))
    start = expected_busbw(fab, "all_reduce", 8 * GIB)  # NCCL_IB_SL unset: PCP 0, lossy
    best, value = best_config(fab)
    assert value > start * 1.03
    assert best.hosts[0].env("NCCL_IB_SL") == "3"
