"""NCCL_DEBUG=INFO summary: every nccl__ fixture (and the nccl-tests log with INFO lines)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import nccl_debug

Loader = Callable[[str], str]


def test_channels_via_net_ib_without_gdr(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_channels_via_net_ib_no_gdr_gid_index__nccl-mesh-plugin-issue56.txt")
    )
    assert len(summary.channels) == 16
    assert summary.channels[1].via == "NET/IB/5"
    assert summary.channels[1].direction == "send"
    assert (summary.channels[0].src_rank, summary.channels[0].dst_rank) == (0, 1)
    assert summary.transports == ("NET/IB",)
    assert summary.gdrdma is False
    assert summary.socket_fallback is False
    assert summary.gid_index == 3
    assert summary.ring_gdr is False


def test_ibext_plugin_merged_roce(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_ibext_plugin_merged_roce_channels__nccl-tests-issue373.txt")
    )
    assert summary.hcas == ("mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1")
    assert {d.link_layer for d in summary.ib_devices} == {"RoCE"}
    assert summary.ib_relaxed_ordering is True
    assert summary.oob_interface == "bond0.526:169.136.106.9<0>"
    assert summary.bootstrap_interface == "bond0.526:169.136.106.9<0>"
    assert summary.networks == ("IBext_v8",)
    assert summary.transports == ("NET/IBext_v8",)
    assert [c.direction for c in summary.channels] == ["receive", "receive", "send"]
    assert summary.env == {"NCCL_P2P_LEVEL": "LOC"}
    assert summary.gid_index is None


def test_net_ib_infiniband_nccl_2_5(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_net_ib_infiniband_nccl2.5__nv_peer_memory-issue56.txt")
    )
    assert summary.version == "2.5.6+cuda10.0"
    assert summary.ib_devices == (nccl_debug.NcclIbDevice("mlx5_0", 1, "IB"),)
    assert summary.ib_relaxed_ordering is False
    assert summary.oob_interface == "ib0:192.168.11.1<0>"
    assert summary.env["NCCL_IB_DISABLE"] == "0"
    assert summary.socket_fallback is False


def test_socket_with_ib_disabled_two_ifaces(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_net_socket_ib_disable_two_ifaces__nccl-tests-issue188.txt")
    )
    assert summary.networks == ("Socket",)
    assert summary.socket_interfaces == ("ibs85f0:192.168.1.14", "ib0:192.168.1.15")
    assert summary.bootstrap_interface == "ibs85f0:192.168.1.10<0>"
    assert summary.env["NCCL_IB_DISABLE"] == "1"
    assert summary.socket_fallback is True
    assert summary.ib_devices == ()


def test_socket_on_lo_with_gdr_disabled(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_net_socket_ib_disabled_lo_topology__nccl-issue1053.txt")
    )
    assert summary.socket_interfaces == ("lo:127.0.0.1",)
    assert summary.gdr_disabled_hcas == ("lo",)
    assert summary.env["NCCL_SOCKET_IFNAME"] == "lo"
    assert summary.env["NCCL_IBEXT_DISABLE"] == "1"
    assert summary.socket_fallback is True


def test_p2p_cumem_channels(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__debug_info_p2p_cumem_channels_and_gid_index_env__nccl-issue1814.txt")
    )
    assert len(summary.channels) == 14
    assert summary.transports == ("P2P/CUMEM",)
    assert summary.channels[0].src_rank == 37
    assert summary.channels[0].dst_rank == 36
    assert summary.channels[0].direction is None
    assert summary.gid_index == 3


def test_warn_ibv_modify_qp(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample("nccl__warn_ibv_modify_qp_no_such_device_wrong_gid_index__nccl-issue718.txt")
    )
    assert summary.warnings == ("Call to ibv_modify_qp failed with error No such device",)


def test_no_ib_device_socket_fallback_in_nccl_tests_log(sample: Loader) -> None:
    summary = nccl_debug.parse(
        sample(
            "nccl-tests__all_reduce_perf_2node_v100_socket_fallback_no_ib_device__nccl-issue398.txt"
        )
    )
    assert summary.version == "2.4.8+cuda10.1"
    assert summary.ib_no_device is True
    assert summary.socket_interfaces == ("ens5:172.31.0.112",)
    assert summary.bootstrap_interface == "ens5:172.31.0.112<0>"
    assert summary.socket_fallback is True
    assert summary.warnings == ("NET/OFI Only EFA provider is supported",)


def test_gdrdma_channel_and_tc_env() -> None:
    text = (
        "[2025-01-01 10:00:00] node1:1:2 [0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
        "node1:1:2 [0] NCCL INFO NCCL_IB_TC set by environment to 106.\n"
        "node1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "node1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n"
        "node1:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/IPC\n"
        "node1:1:2 [0] transport/net_ib.cc:42 (ncclIbConnect) NCCL WARN NET/IB : oops\n"
    )
    summary = nccl_debug.parse(text)
    assert summary.version == "2.26.2+cuda12.8"
    assert summary.traffic_class == 106
    assert summary.gdr_enabled_hcas == ("mlx5_0",)
    assert summary.gdrdma is True
    assert summary.transports == ("NET/IB", "P2P/IPC")
    assert summary.warnings == ("NET/IB : oops",)


@pytest.mark.parametrize("text", ["", "just some text\nmpirun: exit 1\n"])
def test_garbled_input_raises(text: str) -> None:
    with pytest.raises(ParseError, match="no NCCL log lines found"):
        nccl_debug.parse(text)


def test_non_integer_gid_index_raises() -> None:
    summary = nccl_debug.parse("h:1:1 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to x.\n")
    with pytest.raises(ParseError, match="NCCL_IB_GID_INDEX is not an integer"):
        _ = summary.gid_index
