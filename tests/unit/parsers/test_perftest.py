"""perftest parser: every perftest fixture, with values read off the samples by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import perftest

Loader = Callable[[str], str]


def test_read_bw_all_sizes_user_trimmed(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_read_bw_ib_all_sizes_partial_user_trimmed__ucx-issue8852.txt")
    )
    assert result.header.test == "RDMA_Read BW Test"
    assert result.header.device == "mlx5_1"
    assert result.header.outstanding_reads == 16
    assert result.header.cq_moderation == 100
    assert result.header.tx_depth == 128
    assert result.header.mtu == 4096
    assert result.header.link_type == "IB"
    assert result.header.rdma_cm is False
    assert result.header.data_ex_method == "Ethernet"
    local, remote = result.addresses
    assert (local.side, local.lid, local.qpn, local.psn) == ("local", 0x06, 0x0D02, 0xC8533E)
    assert local.out_reads == 0x10
    assert (remote.lid, remote.rkey, remote.vaddr) == (0x05, 0x0805B9, 0x007F99DFBA7000)
    assert result.unit == "MB/sec"
    assert len(result.bw_rows) == 7
    third = result.bw_rows[2]
    assert (third.bytes, third.iterations) == (8, 1000)
    assert (third.bw_peak, third.bw_average, third.msg_rate_mpps) == (19.51, 19.50, 2.556366)
    assert result.bw_rows[-1].bw_average == 310.05
    assert result.error is None


def test_send_bw_server_pkey_mbsec_with_cpu_freq_warning(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_send_bw_server_ib_pkey_index_mbsec__nccl-issue1323.txt")
    )
    assert result.header.test == "Send BW Test"
    assert result.header.rx_depth == 512
    assert result.header.tx_depth is None
    assert result.header.cq_moderation == 1
    assert result.header.max_inline_data == 0
    assert [a.lid for a in result.addresses] == [0x9A, 0x7D]
    assert result.addresses[0].rkey is None
    (row,) = result.bw_rows
    assert (row.bytes, row.iterations, row.bw_peak) == (65536, 1000, 0.00)
    assert (row.bw_average, row.msg_rate_mpps) == (44756.50, 0.716104)
    assert result.warnings[0].startswith("Conflicting CPU frequency values detected")
    assert result.bw_average_gbps(row) == pytest.approx(44756.50 * 2**20 * 8 / 1e9)


def test_write_bw_all_sizes_gbits_small_values(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_write_bw_all_sizes_ib_gbits_client_partial__perftest-issue132.txt")
    )
    assert result.header.test == "RDMA_Write BW Test"
    assert result.header.ibv_wr_api is True
    assert result.unit == "Gb/sec"
    assert [r.bytes for r in result.bw_rows] == [2, 4, 8]
    assert result.bw_rows[0].bw_peak == 0.042350
    assert result.bw_rows[1].bw_average == 0.084457
    assert result.bw_rows[2].bw_average == 0.17
    assert result.bw_rows[2].msg_rate_mpps == 2.641399
    assert result.bw_average_gbps(result.bw_rows[2]) == 0.17
    assert result.addresses[1].qpn == 0x003A


def test_write_bw_8m_client_then_server(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_write_bw_loopback_8M_ib_interleaved__superbenchmark.txt")
    )
    assert result.sides == 2
    assert result.header.device == "ib0"
    assert result.header.tx_depth == 128  # printed by the client side only
    assert result.header.cq_moderation == 1
    assert len(result.addresses) == 4
    assert result.addresses[0].lid == 0xD06
    assert result.addresses[0].qpn == 0x095F
    # the same row is printed by both sides; it is kept once
    (row,) = result.bw_rows
    assert (row.bytes, row.iterations) == (8388608, 20000)
    assert (row.bw_peak, row.bw_average, row.msg_rate_mpps) == (24056.74, 24056.72, 0.003007)


def test_write_bw_all_sizes_interleaved(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_write_bw_loopback_all_sizes_ib_interleaved__superbenchmark.txt")
    )
    assert result.sides == 2
    assert result.header.cq_moderation == 100
    assert result.header.pcie_relax_order is True
    assert [a.qpn for a in result.addresses] == [0x092F, 0x092E, 0x092E, 0x092F]
    assert len(result.bw_rows) == 23  # 2 .. 8388608, the repeated last row kept once
    assert result.bw_rows[0].bytes == 2
    assert result.bw_rows[11].bytes == 4096
    assert result.bw_rows[11].bw_peak == 10034.02
    assert result.bw_rows[11].bw_average == 9948.41
    assert result.bw_rows[12].msg_rate_mpps == 1.636168
    assert result.bw_rows[-1].bytes == 8388608
    assert result.bw_rows[-1].bw_average == 23240.68


def test_write_bw_server_header_only_roce(sample: Loader) -> None:
    text = sample("perftest__ib_write_bw_server_duration_roce_header_only__perftest-issue234.txt")
    with pytest.raises(ParseError, match="result table has no rows"):
        perftest.parse(text)
    result = perftest.parse(text, allow_partial=True)
    assert result.header.link_type == "Ethernet"
    assert result.header.gid_index == 3
    assert result.header.cq_moderation == 1
    local, remote = result.addresses
    assert local.lid == 0
    assert local.qpn == 0x0108
    assert local.gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:05"
    address = local.gid_address()
    assert address is not None
    assert str(address.ipv4_mapped) == "10.255.255.5"
    assert remote.gid == "00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:04"
    assert result.unit == "MB/sec"
    assert result.bw_rows == ()


def test_send_bw_client_rdma_cm_exchange_header_only(sample: Loader) -> None:
    text = sample("perftest__ib_send_bw_client_bond_comm_rdma_cm_header__perftest-issue82.txt")
    with pytest.raises(ParseError, match="no result table found"):
        perftest.parse(text)
    result = perftest.parse(text, allow_partial=True)
    assert result.header.device == "mlx5_bond_0"
    assert result.header.link_type == "Ethernet"
    assert result.header.gid_index == 3
    assert result.header.rdma_cm is False
    assert result.header.data_ex_method == "rdma_cm"
    assert result.addresses == ()


def test_write_lat_rdma_cm_client(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__ib_write_lat_rdma_cm_force_link_ib_dgx_spark_client__spark-vllm-docker.txt")
    )
    assert result.header.test == "RDMA_Write Latency Test"
    assert result.header.device == "rocep1s0f1"
    assert result.header.mtu == 1024
    assert result.header.max_inline_data == 220
    assert result.header.rdma_cm is True
    assert result.header.pcie_relax_order is False
    assert result.table == "lat"
    assert result.addresses[0].qpn == 0x02EE
    assert result.addresses[1].psn == 0x14568B
    (row,) = result.lat_rows
    assert (row.bytes, row.iterations) == (2, 1000)
    assert (row.t_min, row.t_max, row.t_typical, row.t_avg) == (1.42, 1.93, 1.47, 1.47)
    assert (row.t_stdev, row.p99, row.p99_9) == (0.00, 1.57, 1.93)


def test_write_lat_server_roce_mlx4_header(sample: Loader) -> None:
    text = sample("perftest__ib_write_lat_server_roce_mlx4_header__rdma-tutorial-issue8.txt")
    result = perftest.parse(text, allow_partial=True)
    assert result.header.device == "mlx4_0"
    assert result.header.gid_index == 1
    assert result.header.link_type == "Ethernet"
    assert result.addresses[0].rkey == 0xE0010101
    assert result.addresses[1].gid == "00:00:00:00:00:00:00:00:00:00:255:255:12:12:12:02"
    assert any(w.startswith("Requested SQ size") for w in result.warnings)
    with pytest.raises(ParseError, match="no result table found"):
        perftest.parse(text)


@pytest.mark.parametrize(
    ("name", "kind", "first_message"),
    [
        (
            "perftest__error_couldnt_connect_to_server_pre_fix_format__perftest-pr228.txt",
            "connect_failed",
            "Couldn't connect to 192.168.125.211:18515",
        ),
        (
            "perftest__error_couldnt_create_qp_server_and_client__libfabric-issue5149.txt",
            "create_resources_failed",
            "Couldn't get device attributes",
        ),
        (
            "perftest__error_no_devices_leading_space_variant__k8s-rdma-shared-dev-plugin-issue169.txt",
            "no_device",
            "Did not detect devices",
        ),
        (
            "perftest__error_no_devices_older_version_did_not_detect__k8s-rdma-shared-dev-plugin-issue106.txt",
            "no_device",
            "Did not detect devices",
        ),
    ],
)
def test_error_fixtures(sample: Loader, name: str, kind: str, first_message: str) -> None:
    result = perftest.parse(sample(name))
    assert result.error is not None
    assert result.error.kind == kind
    assert result.error.messages[0] == first_message
    with pytest.raises(perftest.PerftestToolError) as caught:
        result.raise_for_error()
    assert caught.value.kind == kind


def test_create_qp_messages_deduplicated(sample: Loader) -> None:
    result = perftest.parse(
        sample("perftest__error_couldnt_create_qp_server_and_client__libfabric-issue5149.txt")
    )
    assert result.error is not None
    assert result.error.messages == (
        "Couldn't get device attributes",
        "Unable to create QP.",
        "Failed to create QP.",
        "Couldn't create IB resources",
    )


def test_port_down_wins_over_generic_messages() -> None:
    text = " Port number 1 state is Down\n Couldn't set the link layer\n"
    result = perftest.parse(text)
    assert result.error is not None
    assert result.error.kind == "port_down"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no perftest output found"),
        ("hello world\n", "no perftest output found"),
        (
            "                    RDMA_Write BW Test\n Device         : mlx5_0\n",
            "no result table found",
        ),
        (
            " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
            " 65536      5000             11",
            "malformed result row",
        ),
        (
            " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
            " 65536      5000             11.2   x.5  0.1\n",
            "malformed result row",
        ),
        (
            " Mtu             : big[B]\n #bytes #iterations BW peak[Gb/sec] x\n 2 5 1.0 1.0 1.0\n",
            "mtu is not",
        ),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        perftest.parse(text)


def test_out_json_strict() -> None:
    text = """{
 "test_info": {"test": "RDMA_Write BW Test", "Device": "mlx5_0", "Number_of_qps": 1,
               "Link_type": "Ethernet", "GID_index": 3, "Mtu": 4096, "rdma_cm_QPs": "OFF"},
 "results": {"MsgSize": 65536, "n_iterations": 5000, "BW_peak": 11.5, "BW_average": 11.4,
             "MsgRate": 0.17}
}"""
    result = perftest.parse_json(text)
    assert result.header.device == "mlx5_0"
    assert result.header.gid_index == 3
    assert result.header.rdma_cm is False
    assert result.bw_rows == (perftest.BwRow(65536, 5000, 11.5, 11.4, 0.17),)


def test_out_json_bare_words_and_trailing_commas() -> None:
    text = '{"test_info": {"Device": mlx5_1, "Link_type": IB,}, "results": [{"MsgSize": 2, ' \
        '"n_iterations": 1000, "BW_peak": 1.0, "BW_average": 0.9, "MsgRate": 2.4,},]}'
    result = perftest.parse_json(text)
    assert result.header.device == "mlx5_1"
    assert result.header.link_type == "IB"
    assert result.bw_rows[0].bytes == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json at all {", "not valid JSON"),
        ('{"test_info": {}}', "no 'results'"),
        ('{"results": {"MsgSize": 2}}', "lacks one of"),
    ],
)
def test_out_json_garbled(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        perftest.parse_json(text)


def test_to_gbps_units() -> None:
    assert perftest.to_gbps(1.0, "Gb/sec") == 1.0
    assert perftest.to_gbps(1000.0, "MiB/sec") == pytest.approx(8.388608)
    with pytest.raises(ParseError, match="unknown bandwidth unit"):
        perftest.to_gbps(1.0, "usec")


# ctx_print_test_info() in perftest's src/perftest_parameters.c prints "Unsupported" for PCIe relax
# order without HAVE_RO and for Lock-free without HAVE_TD_API (the last variant with a tab before ':').
UNSUPPORTED_HEADERS = (
    " PCIe relax order: ON\t\tLock-free      : Unsupported\n",
    " PCIe relax order: Unsupported\t\tLock-free      : OFF\n",
    " PCIe relax order: Unsupported\t\tLock-free\t: Unsupported\n",
)


@pytest.mark.parametrize("line", UNSUPPORTED_HEADERS)
def test_unsupported_features_parse_as_none(line: str) -> None:
    text = (
        "                    RDMA_Write BW Test\n"
        " Dual-port       : OFF\t\tDevice         : mlx5_0\n"
        f"{line}"
        " ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        " 65536      5000             97.50              97.41                 0.185802\n"
    )
    header = perftest.parse(text).header
    expected = {"ON": True, "OFF": False, "Unsupported": None}
    relax, lock = (part.split(":")[1].strip() for part in line.strip().split("\t\t"))
    assert (header.pcie_relax_order, header.lock_free) == (expected[relax], expected[lock])
    assert header.device == "mlx5_0" and header.ibv_wr_api is True


def test_unsupported_is_refused_where_perftest_never_prints_it() -> None:
    with pytest.raises(ParseError, match="dual_port should be ON or OFF"):
        perftest.parse(
            " Dual-port       : Unsupported\n #bytes #iterations BW peak[Gb/sec] x\n 2 5 1.0 1.0 1.0\n"
        )
