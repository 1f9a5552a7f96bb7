"""The transport check by host, from real NCCL_DEBUG=INFO and show_gids output (../shared/fixtures)."""

from __future__ import annotations

from fabtune.perf.diagnose import GidTable, diagnose_job, failure_line, gid_fix, gid_row, host_result
from fabtune.perf.parsers import show_gids
from tests.conftest import fixture_text

GIDS = "show_gids__roce_v1_v2_ipv4_tabs__husky.txt"  # mlx5_0: index 2 RoCEv1 IPv4, 3 RoCEv2 IPv4
LOG = "nccl__debug_info_p2p_cumem_channels_and_gid_index_env__nccl-issue1814.txt"  # NCCL_IB_GID_INDEX=3
# The WARN line of NVIDIA/nccl#1814 (its title), as NCCL 2.2x prints a send that exhausted its retries.
COMPLETION = (
    "transport/net_ib.cc:2326 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<55921> with status=12 "
    "opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:29.87.4.221 remoteGids::ffff:29.87.88.182"
)
V1_ROW = "mlx5_0 1 2 0000:0000:0000:0000:0000:ffff:c0a8:d3f2 192.168.211.242 v1 rdma0"


def table() -> GidTable:
    text = fixture_text(GIDS)
    return GidTable(show_gids.parse(text), text)


def host_log(host: str, *, gid_index: int = 3, warn: bool = False) -> str:
    """The nccl#1814 log as ``host`` printed it, with its NCCL_IB_GID_INDEX, and the WARN line."""
    text = fixture_text(LOG).replace("hostname-test:", f"{host}:")
    text = text.replace("set by environment to 3.", f"set by environment to {gid_index}.")
    return text + (f"{host}:983:1290 [3] {COMPLETION}\n" if warn else "")


def test_the_show_gids_row_is_the_evidence() -> None:
    assert gid_row(fixture_text(GIDS), "mlx5_0", 2) == V1_ROW
    assert gid_row(fixture_text(GIDS), "mlx5_0", 7) == ""


def test_a_gid_index_naming_a_roce_v1_gid_is_the_hosts_own_fault() -> None:
    result, own = host_result("h02", host_log("h02", gid_index=2), failed=True, why="exit 3", gids=table())
    assert own and (result.check, result.host, result.verdict) == ("transport", "h02", "fail")
    assert result.summary == (
        "NCCL_IB_GID_INDEX=2 names mlx5_0's RoCEv1 GID: its queue pairs cannot reach RoCEv2 peers; "
        "its RoCEv2 IPv4 GID is at index 3"
    )
    assert result.evidence == V1_ROW


def test_a_gid_index_outside_the_table_quotes_nccls_own_echo() -> None:
    result, own = host_result("h02", host_log("h02", gid_index=9), failed=True, gids=table())
    assert own and result.summary.startswith("NCCL_IB_GID_INDEX=9: mlx5_0 has no GID at index 9")
    assert result.evidence.endswith("NCCL INFO NCCL_IB_GID_INDEX set by environment to 9.")


def test_a_roce_v1_gid_on_a_job_that_ran_is_a_warning() -> None:
    result, own = host_result("h02", host_log("h02", gid_index=2), failed=False, gids=table())
    assert not own and result.verdict == "warn" and "RoCEv1" in result.summary


def test_the_host_at_fault_is_named_and_the_others_failed_through_it() -> None:
    output = host_log("h01", warn=True) + host_log("h02", gid_index=2, warn=True) + host_log("h03")
    why = failure_line(3, fixture_text(
        "nccl-tests__error_test_nccl_failure_unhandled_system_error_mpirun_exit3__nccl-tests-issue36.txt"))
    found = diagnose_job(["h01", "h02", "h03"], output, failed=True, why=why, gids=dict.fromkeys(
        ("h01", "h02", "h03"), table()))
    assert found.at_fault == ["h02"]
    by_host = {r.host: r for r in found.results}
    assert by_host["h02"].verdict == "fail" and by_host["h02"].evidence == V1_ROW
    assert by_host["h01"].verdict == "warn"
    assert by_host["h01"].summary.startswith("failed through h02: NCCL error: NET/IB : Got completion")
    assert by_host["h01"].evidence.endswith("vendor err 129 (Send) localGid ::ffff:29.87.4.221 "
                                            "remoteGids::ffff:29.87.88.182")
    assert by_host["h03"].verdict == "warn"
    assert "exit 3: pkb-aa8dbd1b-1: Test NCCL failure" in by_host["h03"].summary


def test_with_no_host_at_fault_every_host_of_the_failed_job_fails_with_its_evidence() -> None:
    output = host_log("h01", warn=True) + host_log("h02")
    found = diagnose_job(["h01", "h02", "h03"], output, failed=True, why="exit 3: h01: Test NCCL failure")
    assert found.at_fault == []
    by_host = {r.host: r for r in found.results}
    assert all(r.verdict == "fail" for r in found.results)
    assert by_host["h01"].evidence.startswith("h01:983:1290 [3] transport/net_ib.cc:2326 NCCL WARN")
    assert by_host["h02"].summary == "the benchmark failed here: exit 3: h01: Test NCCL failure"
    assert by_host["h03"].summary == "no NCCL log from this host"


def test_an_ibv_modify_qp_warning_is_the_evidence() -> None:
    log = fixture_text("nccl__warn_ibv_modify_qp_no_such_device_wrong_gid_index__nccl-issue718.txt")
    result, own = host_result("h01", log, failed=True, why="exit 3")
    assert not own and result.verdict == "fail"
    assert result.summary == "NCCL error: Call to ibv_modify_qp failed with error No such device"
    assert result.evidence == ("[0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error "
                               "No such device")


def test_a_tcp_fallback_is_the_hosts_own_fault() -> None:
    log = fixture_text("nccl__debug_info_net_socket_ib_disable_two_ifaces__nccl-tests-issue188.txt")
    result, own = host_result("user", log, failed=True, why="exit 3")
    assert own and result.verdict == "fail" and result.summary.startswith("TCP fallback")


def test_a_job_that_ran_passes_on_its_log() -> None:
    log = fixture_text("nccl__debug_info_channels_via_net_ib_no_gdr_gid_index__nccl-mesh-plugin-issue56.txt")
    result, own = host_result("h01", log, failed=False, gids=table())
    assert not own and result.verdict != "fail" and result.host == "h01"


def test_the_failure_line_skips_mpiruns_rules() -> None:
    assert failure_line(3, "x\n" + "-" * 70 + "\n") == "exit 3: x"
    assert failure_line(3, "-----\n") == "exit 3: no output"


def v1_only_table() -> GidTable:
    """The husky table of a NIC without RoCE v2: its v2 rows gone."""
    text = "".join(ln for ln in fixture_text(GIDS).splitlines(keepends=True) if "\tv2\t" not in ln)
    text = text.replace("n_gids_found=4", "n_gids_found=2")
    return GidTable(show_gids.parse(text), text)


def test_a_host_whose_gid_index_is_wrong_is_fixed_by_its_rocev2_ipv4_index() -> None:
    assert gid_fix("h02", host_log("h02", gid_index=2), table()) == 3  # its RoCEv1 GID
    assert gid_fix("h02", host_log("h02", gid_index=9), table()) == 3  # no GID there
    assert gid_fix("h02", host_log("h02", gid_index=3), table()) is None  # not its fault
    assert gid_fix("h02", host_log("h02", gid_index=2), v1_only_table()) is None  # no RoCEv2 GID at all
    assert gid_fix("h02", host_log("h02", gid_index=2), None) is None  # the table was not read


def test_the_diagnosis_holds_the_fix_of_each_host_at_fault_that_has_one() -> None:
    output = host_log("h01", warn=True) + host_log("h02", gid_index=2, warn=True)
    output += host_log("h03", gid_index=2)
    tables = {"h01": table(), "h02": table(), "h03": v1_only_table()}
    found = diagnose_job(["h01", "h02", "h03"], output, failed=True, why="exit 3", gids=tables)
    assert found.at_fault == ["h02", "h03"]
    assert found.gid_fixes == {"h02": 3}  # h03's NIC has no RoCEv2 GID: no knob fixes it
