"""nccl-tests parser: every nccl-tests fixture, with values read off the samples by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import nccl_tests

Loader = Callable[[str], str]


def test_allreduce_old_table_with_error_column(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample("nccl-tests__allreduce_perf_8xA100_single_node__superbenchmark.txt")
    )
    header = result.header
    assert header is not None
    assert (header.n_thread, header.n_gpus, header.min_bytes) == (1, 8, 1)
    assert header.max_bytes == 8589934592
    assert (header.warmup_iters, header.iters, header.validation) == (5, 20, 0)
    assert header.step == "2(factor)"
    assert header.agg_iters is None
    assert len(result.devices) == 8
    assert result.devices[3].rank == 3
    assert result.devices[3].pid == 112424
    assert result.devices[3].host == "localhost"
    assert result.devices[3].bus_id == "0x00"
    assert result.devices[3].name == "A100-SXM4-40GB"
    assert result.devices[3].group is None
    assert result.check_column == "error"
    assert len(result.rows) == 34
    third = result.rows[2]
    assert (third.size_bytes, third.count, third.type, third.redop) == (4, 1, "float", "sum")
    assert third.root is None
    assert third.out_of_place.time_us == 34.73
    assert third.in_place.time_us == 35.30
    assert third.out_of_place.error is None  # printed as N/A
    row_4m = result.rows[22]
    assert row_4m.size_bytes == 4194304
    assert row_4m.out_of_place.time_us == 112.0
    assert row_4m.out_of_place.algbw_gbps == 37.44
    assert row_4m.out_of_place.busbw_gbps == 65.52
    assert row_4m.in_place.busbw_gbps == 66.60
    last = result.rows[-1]
    assert (last.size_bytes, last.count) == (8589934592, 2147483648)
    assert last.out_of_place.time_us == 63896
    assert last.in_place.busbw_gbps == 235.03
    assert result.out_of_bounds == 0
    assert result.out_of_bounds_ok is True
    assert result.avg_busbw_gbps == 68.4048
    assert result.max_busbw_gbps == 235.26


def test_allgather_old_table_without_redop(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample("nccl-tests__allgather_perf_8xA100_single_node__superbenchmark.txt")
    )
    assert len(result.rows) == 34
    row = result.rows[5]
    assert (row.size_bytes, row.count, row.type, row.redop, row.root) == (32, 1, "float", None, None)
    assert row.out_of_place.time_us == 35.03
    assert result.rows[-2].out_of_place.time_us == 17016
    assert result.rows[-2].in_place.algbw_gbps == 260.71
    assert result.rows[-2].in_place.busbw_gbps == 228.12
    assert result.avg_busbw_gbps == 58.2651


def test_alltoall_blank_redop(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample("nccl-tests__alltoall_perf_8xA100_single_node__superbenchmark.txt")
    )
    assert result.devices[0].pid == 167261
    assert len(result.rows) == 34
    row = result.rows[26]
    assert row.size_bytes == 67108864
    assert row.redop is None
    assert row.out_of_place.time_us == 396.8
    assert row.out_of_place.busbw_gbps == 147.99
    assert row.in_place.algbw_gbps == 173.41
    assert result.avg_busbw_gbps == 58.6481
    assert result.check_column == "error"


def test_rows_only_root_minus1(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample("nccl-tests__all_reduce_perf_rows_root_minus1_partial__mooncake-pr3484.txt")
    )
    assert result.header is None
    assert len(result.rows) == 11
    assert result.check_column == "#wrong"
    third = result.rows[2]
    assert (third.size_bytes, third.count, third.redop, third.root) == (131072, 32768, "sum", -1)
    assert third.out_of_place.busbw_gbps == 11.91
    assert third.in_place.busbw_gbps == 12.44
    assert third.out_of_place.wrong == 0
    assert result.rows[-1].out_of_place.busbw_gbps == 300.51
    assert result.rows[-1].in_place.busbw_gbps == 300.52
    assert result.avg_busbw_gbps is None


def test_table_newer_format_with_units_line(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample(
            "nccl-tests__all_reduce_perf_table_root_minus1_wrong0_newer_format_partial__"
            "deepep-issue303.txt"
        )
    )
    assert len(result.rows) == 10
    assert result.rows[3].size_bytes == 32
    assert result.rows[3].out_of_place.time_us == 24.63
    assert result.rows[3].in_place.time_us == 13.10
    assert result.rows[-1].in_place.busbw_gbps == 0.23
    assert all(r.out_of_place.wrong == 0 and r.in_place.wrong == 0 for r in result.rows)


@pytest.mark.parametrize(
    ("name", "ranks", "last_host", "last_bus"),
    [
        (
            "nccl-tests__all_reduce_perf_2node_h100_device_lines_partial__nccl-tests-issue294.txt",
            12,
            "h100-4",
            "0002:00:04",
        ),
        (
            "nccl-tests__all_reduce_perf_mpi_srun_2node_h100_device_lines_partial__"
            "soperator-pr428.txt",
            12,
            "worker-0",
            "0x99",
        ),
        (
            "nccl-tests__all_reduce_perf_mpirun_cmdline_h100_partial__"
            "ibm-pytorch-comm-bench-issue1.txt",
            7,
            "jo-dau5moatnhdynmy6-worker-0",
            "0x91",
        ),
    ],
)
def test_device_lines_partial(
    sample: Loader, name: str, ranks: int, last_host: str, last_bus: str
) -> None:
    text = sample(name)
    with pytest.raises(ParseError, match="no result table found"):
        nccl_tests.parse(text)
    result = nccl_tests.parse(text, allow_partial=True)
    assert len(result.devices) == ranks
    assert result.devices[-1].host == last_host
    assert result.devices[-1].bus_id == last_bus
    assert result.devices[-1].group == 0
    assert result.devices[-1].name == "NVIDIA H100 80GB HBM3"
    assert result.header is not None
    assert result.header.agg_iters == 1
    assert result.header.graph == 0


def test_issue294_header_values(sample: Loader) -> None:
    text = sample(
        "nccl-tests__all_reduce_perf_2node_h100_device_lines_partial__nccl-tests-issue294.txt"
    )
    result = nccl_tests.parse(text, allow_partial=True)
    assert result.header is not None
    assert result.header.min_bytes == 134217728
    assert result.header.max_bytes == 2147483648
    assert result.header.iters == 10
    assert result.devices[8].pid == 739786
    assert result.devices[8].rank == 8


def test_old_device_lines_with_nccl_info_interleaved(sample: Loader) -> None:
    text = sample(
        "nccl-tests__all_reduce_perf_2node_v100_socket_fallback_no_ib_device__nccl-issue398.txt"
    )
    result = nccl_tests.parse(text, allow_partial=True)
    assert result.header is not None
    assert (result.header.min_bytes, result.header.max_bytes) == (8388608, 268435456)
    assert result.header.iters == 50
    assert result.header.agg_iters is None
    first, second = result.devices
    assert (first.rank, first.pid, first.host) == (0, 7846, "ip-172-31-0-112")
    assert second.host == "ip-172-31-13-129"
    assert second.name == "Tesla V100-SXM2-32GB"
    assert second.group is None


def test_leading_hash_stripped_blocking(sample: Loader) -> None:
    text = sample(
        "nccl-tests__all_reduce_perf_blocking_single_gpu_efa_header_leading_hash_stripped__"
        "nccl-tests-issue249.txt"
    )
    result = nccl_tests.parse(text, allow_partial=True)
    assert result.header is not None
    assert (result.header.min_bytes, result.header.max_bytes) == (8, 16777216)
    assert result.header.iters == 5
    assert result.blocking is True
    (device,) = result.devices
    assert device.pid == 127
    assert device.name == "NVIDIA A10G"
    assert result.check_column == "#wrong"
    assert result.rows == ()


def test_nccl_failure_and_mpirun_exit_code(sample: Loader) -> None:
    result = nccl_tests.parse(
        sample(
            "nccl-tests__error_test_nccl_failure_unhandled_system_error_mpirun_exit3__"
            "nccl-tests-issue36.txt"
        )
    )
    assert [f.host for f in result.failures] == ["pkb-aa8dbd1b-1", "pkb-aa8dbd1b-0"]
    failure = result.failures[0]
    assert failure.kind == "NCCL"
    assert failure.where == "common.cu:345"
    assert failure.message == "unhandled system error"
    assert failure.exit_code == 3
    assert result.rows == ()


def test_current_format_version_and_collective() -> None:
    text = (
        "# nccl-tests version 2.17.1 nccl-headers=22603 nccl-library=22603\n"
        "# Collective test starting: all_reduce_perf\n"
        "# nThread 1 nGpus 1 minBytes 8192 maxBytes 8589934592 step: 2(factor) warmup iters: 10 "
        "iters: 100 agg iters: 1 validation: 1 graph: 0 unalign: 0\n"
        "#  Rank  0 Group  0 Pid 1666603 on spark-d708 device  0 [000f:01:00] NVIDIA GB10\n"
        "        8192          2048     float     sum      -1    35.15    0.23    0.23       0"
        "    30.33    0.27    0.27     N/A\n"
        "# Avg bus bandwidth    : 68.4048 FAILED\n"
    )
    result = nccl_tests.parse(text)
    assert result.version == "2.17.1"
    assert result.collective == "all_reduce_perf"
    assert result.header is not None
    assert result.header.unalign == 0
    assert result.devices[0].bus_id == "000f:01:00"
    assert result.rows[0].in_place.wrong is None
    assert result.avg_busbw_status == "FAILED"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no nccl-tests output found"),
        ("random words\n", "no nccl-tests output found"),
        ("# nThread 1 nGpus 8 minBytes 1\n", "header line lacks maxBytes"),
        ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8\n", "no result table found"),
        ("        8192          2048     float     sum      -1    35.15    0.23\n", "malformed"),
        (
            "        8192   2048   float  sum  -1  35.15  0.23  abc  0  30.33  0.27  0.27  0\n",
            "busbw in result row at line 1 is not a number",
        ),
        (
            "   8192   2048   float  sum  -1  7  35.15  0.23  0.2  0  30.33  0.27  0.27  0\n",
            "malformed",
        ),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        nccl_tests.parse(text)


# Launcher labels (issue 14): Open MPI `mpirun --tag-output` puts "[jobid,rank]<stdout>:" before
# each line (mpirun(1)); Slurm `srun --label` puts the task id and ": " (srun(1)).
@pytest.mark.parametrize("label", ["[1,0]<stdout>:", "0: ", " 12: "])
def test_launcher_labelled_log_parses_as_the_plain_one(sample: Loader, label: str) -> None:
    text = sample("nccl-tests__allreduce_perf_8xA100_single_node__superbenchmark.txt")
    labelled = "".join(f"{label}{line}\n" for line in text.splitlines())
    assert nccl_tests.parse(labelled) == nccl_tests.parse(text)
