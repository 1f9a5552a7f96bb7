"""The ``parse`` click command, driven in-process with CliRunner."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabtune.commands.parse import PARSERS, parse
from fabtune.errors import ConfigError, ParseError
from fabtune.perf.parsers import ibstat

Loader = Callable[[str], str]

CASES = [
    ("ib_write_bw", "perftest__ib_write_bw_all_sizes_ib_gbits_client_partial__perftest-issue132.txt"),
    ("ib_read_bw", "perftest__ib_read_bw_ib_all_sizes_partial_user_trimmed__ucx-issue8852.txt"),
    ("ib_send_bw", "perftest__ib_send_bw_server_ib_pkey_index_mbsec__nccl-issue1323.txt"),
    ("nccl-tests", "nccl-tests__allreduce_perf_8xA100_single_node__superbenchmark.txt"),
    ("nccl-debug", "nccl__debug_info_ibext_plugin_merged_roce_channels__nccl-tests-issue373.txt"),
    ("topo", "nvidia-smi__topo_m_8xH100_8nic_full_with_legend__sglang-issue30401.txt"),
    (
        "mlnx_qos",
        "mlnx_qos__full_dscp_trust_pfc_ets_whitespace_collapsed__cnblogs-mellanox-community-copy.txt",
    ),
    ("show_gids", "show_gids__roce_v1_v2_ipv4_tabs__husky.txt"),
    ("ibstat", "ibstat__ib_hdr_tabs_redacted_then_ibpanic_error__gpud-pr752.txt"),
    ("ibdev2netdev", "ibdev2netdev__single_vf_in_pod_down_raw__sriov-network-operator-issue382.txt"),
]


@pytest.mark.parametrize(("tool", "name"), CASES)
def test_table_output(sample: Loader, tool: str, name: str) -> None:
    result = CliRunner().invoke(parse, [tool, "-"], input=sample(name))
    assert result.exit_code == 0, result.output
    assert result.output.strip()


def test_json_output_perftest(sample: Loader) -> None:
    text = sample("perftest__ib_write_bw_all_sizes_ib_gbits_client_partial__perftest-issue132.txt")
    result = CliRunner().invoke(parse, ["ib_write_bw", "-", "--json"], input=text)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["unit"] == "Gb/sec"
    assert data["bw_rows"][2]["bw_average"] == 0.17
    assert data["header"]["device"] == "mlx5_0"


def test_json_output_topo_from_file(sample: Loader, tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(sample("nvidia-smi__topo_m_8xH100_8nic_full_with_legend__sglang-issue30401.txt"))
    result = CliRunner().invoke(parse, ["topo", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cells"]["GPU3"]["NIC3"] == "PIX"
    assert data["nic_names"]["NIC3"] == "mlx5_3"


def test_ethtool_and_dcb_text() -> None:
    runner = CliRunner()
    stats = runner.invoke(parse, ["ethtool", "-"], input="NIC statistics:\n     rx_pause: 4\n")
    assert stats.exit_code == 0
    assert "rx_pause" in stats.output
    shown = runner.invoke(parse, ["dcb", "-", "--json"], input="prio-pfc 0:off 3:on\n")
    assert json.loads(shown.output)["arrays"]["prio-pfc"] == [["0", "off"], ["3", "on"]]


def test_every_tool_has_a_parser() -> None:
    assert sorted(PARSERS) == sorted(
        ["ib_write_bw", "ib_read_bw", "ib_send_bw", "nccl-tests", "nccl-debug", "topo",
         "mlnx_qos", "show_gids", "ibstat", "ibdev2netdev", "ethtool", "dcb"]
    )


def test_garbled_input_raises_parse_error() -> None:
    result = CliRunner().invoke(parse, ["nccl-tests", "-"], input="nothing here\n")
    assert isinstance(result.exception, ParseError)
    assert "nccl-tests: no nccl-tests output found" in str(result.exception)


def test_missing_file_raises_config_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(parse, ["ibstat", str(tmp_path / "absent.txt")])
    assert isinstance(result.exception, ConfigError)


def test_unknown_tool_is_a_usage_error() -> None:
    result = CliRunner().invoke(parse, ["iperf", "-"], input="")
    assert result.exit_code == 2


def test_json_ibstat_rate_is_a_number_as_in_ibstatus(sample: Loader) -> None:
    """One type per field: ``rate`` is the text as printed, ``rate_gbps`` a number, in both parsers."""
    text = sample("ibstat__mlx4_ddr_two_ports_active_polling__archwiki.txt")
    result = CliRunner().invoke(parse, ["ibstat", "-", "--json"], input=text)
    assert result.exit_code == 0, result.output
    port1, port2 = json.loads(result.output)["cas"][0]["ports"]
    assert (port1["rate"], port1["rate_gbps"]) == ("20", 20.0)
    assert (port2["rate"], port2["rate_gbps"]) == ("10", 10.0)
    status = dataclasses.asdict(ibstat.parse_ibstatus("Infiniband device 'mlx5_0' port 1 status:\n"
                                                      "\trate:\t\t 400 Gb/sec (4X NDR)\n")[0])
    assert isinstance(status["rate_gbps"], float) and isinstance(status["rate"], str)
