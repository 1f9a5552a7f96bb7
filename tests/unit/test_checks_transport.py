"""The transport check on real NCCL_DEBUG=INFO logs (../shared/fixtures): NET/IB, GPUDirect, fallback."""

from __future__ import annotations

from fabtune.perf import checks
from fabtune.perf.parsers import nccl_debug
from tests.conftest import fixture_text


def check(name: str) -> checks.CheckResult:
    raw = fixture_text(name)
    return checks.transport("h01", nccl_debug.parse(raw), raw)


def test_channels_via_net_ib_without_gdrdma_warn_that_traffic_is_staged() -> None:
    result = check("nccl__debug_info_channels_via_net_ib_no_gdr_gid_index__nccl-mesh-plugin-issue56.txt")
    assert result.verdict == "warn" and "without GPUDirect RDMA" in result.summary
    assert "via NET/IB" in result.evidence


def test_the_ibext_plugin_over_roce_is_net_ib() -> None:
    result = check("nccl__debug_info_ibext_plugin_merged_roce_channels__nccl-tests-issue373.txt")
    assert result.verdict != "fail" and "fallback" not in result.summary
    assert "no inter-node NCCL transport" not in result.summary


def test_net_socket_is_a_tcp_fallback() -> None:
    result = check("nccl__debug_info_net_socket_ib_disable_two_ifaces__nccl-tests-issue188.txt")
    assert result.verdict == "fail" and result.summary.startswith("TCP fallback")
