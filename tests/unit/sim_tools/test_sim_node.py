"""NodeState and provisioning: the emulated tree, its layout and its state round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.sim.node import (
    KERNEL_NET_ATTRS,
    AppEntry,
    InitialSettings,
    Layout,
    NodeDescription,
    NodeState,
    NoSuchDeviceError,
    pcie_distance,
    provision,
)

from .conftest import roce_node


def test_provision_tree(roce: NodeState, tmp_path: Path) -> None:
    ib = tmp_path / "sys/class/infiniband/mlx5_0"
    assert (ib / "node_type").read_text() == "1: CA\n"
    assert (ib / "device/net/ens1np0").is_dir()
    assert (ib / "ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (ib / "ports/1/gid_attrs/types/3").read_text() == "RoCE v2\n"
    assert (ib / "ports/1/gids/5").read_text().startswith("0000:0000:0000:0000:0000:0000")
    net = tmp_path / "sys/class/net/ens1np0"
    assert (net / "ecn/roce_np/enable/3").read_text() == "1\n"
    assert (net / "qos/trust").read_text() == "pcp\n"
    for attr in KERNEL_NET_ATTRS:
        assert not (net / attr).exists()
    cm = tmp_path / "configfs/rdma_cm/mlx5_0/ports/1"
    assert (cm / "default_roce_mode").read_text() == "RoCE v2\n"
    assert json.loads((tmp_path / "emu/node.json").read_text())["hostname"] == "h01"
    assert (tmp_path / "emu/dcb/ens1np0.json").exists()


def test_roce_gid_table(roce: NodeState) -> None:
    gids = roce.gid_table("mlx5_0")
    assert gids[0].gid == "fe80:0000:0000:0000:0000:0aff:fe4e:0100"
    assert gids[0].gid == gids[1].gid
    assert (gids[0].type, gids[1].type) == ("IB/RoCE v1", "RoCE v2")
    assert gids[3].gid == "0000:0000:0000:0000:0000:ffff:0a4e:010b"
    assert gids[3].ndev == "ens1np0"
    assert gids[4].gid == "0000:0000:0000:0000:0000:0000:0000:0000"


def test_ib_gid_and_guid(ib: NodeState) -> None:
    nic = ib.nic("mlx5_1")
    assert nic.port_guid == nic.guid == 0x9C63C00300554001
    assert ib.gid_table("mlx5_1")[0].gid == "fe80:0000:0000:0000:9c63:c003:0055:4001"
    assert ib.gid_table("mlx5_1")[0].ndev is None
    assert ib.port_attr("mlx5_1", "lid") == "0x6"


def test_layouts() -> None:
    inside = NodeState.inside_host().layout
    assert inside == Layout(Path("/sys/class"), Path("/sys/kernel/config"),
                            Path("/var/lib/fabtune-emu"))
    ctl = NodeState.on_controller(Path("/tb/hosts/h01"), netns="fabtune-h01")
    assert ctl.layout.configfs == Path("/tb/hosts/h01/configfs")
    assert ctl.netns == "fabtune-h01"


def test_description_round_trip() -> None:
    raw = roce_node()
    desc = NodeDescription.from_dict(raw)
    assert NodeDescription.from_dict(desc.to_dict()) == desc
    assert desc.cpu_affinity(1) == "48-95,144-191"


def test_initial_settings_round_trip() -> None:
    s = InitialSettings.from_dict({"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0],
                                   "dscp2prio": {"26": 3}, "mtu": 9000})
    assert InitialSettings.from_dict(s.to_dict()) == s
    assert s.dscp_map()[26] == 3
    assert s.dscp_map()[48] == 6
    with pytest.raises(ValueError, match="unknown"):
        InitialSettings.from_dict({"bogus": 1})


def test_fresh_state_reads_writes(roce: NodeState, tmp_path: Path) -> None:
    roce.set_pfc("ens1np0", enabled=[0, 0, 0, 1, 0, 0, 0, 0])
    roce.set_trust("ens1np0", "dscp")
    roce.set_dscp2prio("ens1np0", {26: 3})
    roce.set_ecn("ens1np0", "rp", 3, False)
    roce.set_roce_tos("mlx5_0", 106)
    fresh = NodeState.under(tmp_path)
    assert fresh.get_pfc("ens1np0").enabled == (0, 0, 0, 1, 0, 0, 0, 0)
    assert fresh.get_buffers("ens1np0").prio2buffer == (0, 0, 0, 1, 0, 0, 0, 0)
    assert fresh.get_trust("ens1np0") == "dscp"
    assert fresh.get_dscp2prio("ens1np0")[26] == 3
    assert fresh.get_ecn("ens1np0", "rp")[3] == 0
    assert fresh.get_roce_tos("mlx5_0") == 106
    assert AppEntry("dscp", 26, 3) in fresh.get_app_table("ens1np0")
    assert len(fresh.dscp_app_entries("ens1np0")) == 64  # trust set directly: the whole map


def test_counters(roce: NodeState) -> None:
    roce.add_counters("ens1np0", {"np_cnp_sent": 5, "port_xmit_data": 100,
                                  "rx_prio3_pause": 7})
    roce.add_counters("ens1np0", {"np_cnp_sent": 1})
    counters = roce.read_counters("ens1np0")
    assert (counters["np_cnp_sent"], counters["port_xmit_data"]) == (6, 100)
    assert roce.ethtool_stats("ens1np0")["rx_prio3_pause"] == 7
    with pytest.raises(KeyError):
        roce.add_counters("ens1np0", {"nope": 1})


def test_mtu_sources(roce: NodeState, tmp_path: Path) -> None:
    assert roce.mtu("ens1np0") == 4200
    (tmp_path / "sys/class/net/ens1np0/mtu").write_text("9000\n")
    assert roce.mtu("ens1np0") == 9000
    assert roce.operstate("ens1np0") == "up"


def test_unknown_device(roce: NodeState) -> None:
    with pytest.raises(NoSuchDeviceError):
        roce.get_trust("eth9")


def test_pcie_distance() -> None:
    assert pcie_distance(0, 1, 0, 1) == "PIX"
    assert pcie_distance(0, 1, 0, 1, bridges=2) == "PXB"
    assert pcie_distance(0, 1, 0, 2) == "NODE"
    assert pcie_distance(0, 1, 1, 1) == "SYS"


def test_provision_accepts_dataclasses(tmp_path: Path) -> None:
    provision(tmp_path, NodeDescription.from_dict(roce_node()), InitialSettings(trust="dscp"))
    assert NodeState.under(tmp_path).get_trust("ens3np0") == "dscp"
