"""Emulated perftest: argument grammar, output layout (read back by the project's parser), runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabtune.perf.parsers import perftest as parser
from fabtune.sim.node import NodeState
from fabtune.sim.tools import TOOLS, perftest
from fabtune.sim.tools import _perftest_out as fmt
from fabtune.sim.tools._perftest_args import ParseExit, margin_s, parse
from tests.conftest import fixture_text

RUNNER = (
    "import sys; from pathlib import Path; from fabtune.sim.node import NodeState; "
    "from fabtune.sim.tools import perftest; "
    "sys.exit(perftest.run(sys.argv[1], sys.argv[4:], NodeState.under(Path(sys.argv[2])), Path(sys.argv[3])))"
)


def tool(rack: Path, host: str, prog: str, *argv: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", RUNNER, prog, str(rack / host), str(rack / "fabric"), *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_banner(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if "Waiting for client" in proc.stdout.readline():
            return
    raise AssertionError("no banner")


def test_tools_are_registered() -> None:
    assert {"ib_write_bw", "ib_read_bw", "ib_send_bw"} <= set(TOOLS)


def test_defaults_and_gnu_permutation() -> None:
    args = parse("ib_read_bw", ["cn2", "-a", "-F", "-d", "mlx5_1", "--report_gbits", "-q8", "--tclass=106"])
    assert (args.host, args.all_sizes, args.dev, args.report_gbits, args.qps, args.tclass) == (
        "cn2", True, "mlx5_1", True, 8, 106)
    assert args.iters == 1000 and parse("ib_write_bw", []).iters == 5000
    assert parse("ib_write_bw", ["-s", "0x100"]).size == 256


@pytest.mark.parametrize(("argv", "stderr", "stdout"), [
    (["--bogus"], "ib_write_bw: unrecognized option '--bogus'\n Invalid Command or flag.", "Usage:"),
    (["-Y"], "ib_write_bw: invalid option -- 'Y'", "Usage:"),
    (["-x"], "ib_write_bw: option requires an argument -- 'x'", "Usage:"),
    (["-q", "0"], " num of Qps should be between 1 and 16384\n Parser function exited with Error", ""),
    (["-a", "-D", "3"], "Duration mode currently doesn't support running on all sizes.", "-" * 87),
    (["-T", "5", "h1"], "", " TOS only valid for rdma_cm based QP and RawEth QP "),
    # perftest_parameters.c: the margin is checked against -D, else against DEF_DURATION (5 s)
    (["-D", "2", "-f", "1"], "please check that DURATION > 2*MARGIN", "-" * 87),
    (["-f", "3"], "please check that DURATION > 2*MARGIN", "-" * 87),
    (["-f", "-1"], " Margin must be non-negative\n Parser function exited with Error", ""),
])
def test_rejects_like_perftest(argv: list[str], stderr: str, stdout: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ParseExit) as done:
        parse("ib_write_bw", argv)
    assert done.value.code == 1
    got = capsys.readouterr()
    assert stderr in got.err and stdout in got.out


def test_margin_defaults_to_a_quarter_of_the_duration() -> None:
    # perftest_parameters.c: margin = duration / 4 (int) when -f is not given, in duration mode only
    assert [margin_s(parse("ib_write_bw", ["-D", d])) for d in ("2", "5", "8")] == [0, 1, 2]
    assert margin_s(parse("ib_write_bw", ["-D", "8", "-f", "3"])) == 3
    assert margin_s(parse("ib_write_bw", [])) == -1
    assert parse("ib_write_bw", ["-f", "2"]).margin == 2


def test_a_duration_run_lasts_its_duration(rack: Path) -> None:
    """perftest's catch_alarm: a -D N run samples between its margins and stops at N seconds."""
    assert perftest.sampled_window(parse("ib_write_bw", ["-D", "2"])) == (0.0, 2.0, 2.0)
    assert perftest.sampled_window(parse("ib_write_bw", ["-D", "5", "-f", "2"])) == (2.0, 3.0, 5.0)
    assert perftest.sampled_window(parse("ib_write_bw", ["-D", "8"])) == (2.0, 6.0, 8.0)
    assert perftest.sampled_window(parse("ib_write_bw", [])) == (0.0, perftest.NO_DURATION_S,
                                                                 perftest.NO_DURATION_S)
    server = tool(rack, "h02", "ib_write_bw", "-p", "19413", "-D", "1", "--report_gbits")
    wait_banner(server)
    start = time.monotonic()
    client = tool(rack, "h01", "ib_write_bw", "-p", "19413", "-D", "1", "--report_gbits", "127.0.0.1")
    out, err = client.communicate(timeout=30)
    took = time.monotonic() - start
    server.communicate(timeout=30)
    assert client.returncode == 0, err
    assert took >= 1.0  # never shorter than -D; an upper bound would time the machine, not the tool
    assert parser.parse(out).bw_rows


def test_help_and_version_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert perftest.write_main(["-h"]) == 1
    assert capsys.readouterr().out.startswith("Usage:\n  ib_write_bw            start a server")
    assert perftest.write_main(["-V"]) == 1
    assert capsys.readouterr().out == "Version: 6.06\n"


def test_missing_device(rack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = perftest.run("ib_write_bw", ["-d", "mlx5_9", "h02"], NodeState.under(rack / "h01"),
                        rack / "fabric")
    assert code == 1
    assert capsys.readouterr().err == (
        "IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n")


def test_row_formats_match_perftest() -> None:
    args = parse("ib_write_bw", ["--report_gbits", "h"])
    assert fmt.format_row(args, fmt.Row(65536, 5000, 392.15)).startswith(" 65536      5000             ")
    assert "\t\t   " in fmt.format_row(args, fmt.Row(65536, 5000, 392.15))
    small = fmt.format_row(args, fmt.Row(2, 5000, 0.042))
    assert small.startswith(" 2          5000           0.042") and "\t" not in small
    assert fmt.c_hex(0, 4) == "0000" and fmt.c_hex(0x9A, 4) == "0x9a" and fmt.c_hex(0x32, 6) == "0x0032"
    assert fmt.gid_decimal("0000:0000:0000:0000:0000:ffff:0aff:ff05") == \
        "00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:05"


def test_client_and_server_print_the_same_table(rack: Path) -> None:
    server = tool(rack, "h02", "ib_write_bw", "-p", "19411", "-q", "8", "--report_gbits")
    wait_banner(server)
    client = tool(rack, "h01", "ib_write_bw", "-p", "19411", "-q", "8", "--report_gbits", "127.0.0.1")
    c_out, c_err = client.communicate(timeout=30)
    s_out, _ = server.communicate(timeout=30)
    assert client.returncode == 0 and server.returncode == 0, c_err
    mine, theirs = parser.parse(c_out), parser.parse(s_out)
    assert mine.bw_rows == theirs.bw_rows and len(mine.addresses) == 16
    assert 388 < mine.bw_average_gbps(mine.bw_rows[0]) <= 392.2
    fixture = parser.parse(fixture_text(
        "perftest__ib_write_bw_server_duration_roce_header_only__perftest-issue234.txt"), allow_partial=True)
    fields = {k for k, v in vars(fixture.header).items() if v is not None}
    assert fields <= {k for k, v in vars(theirs.header).items() if v is not None}
    tx = NodeState.under(rack / "h01").read_counters("mlx5_0")
    assert tx["tx_prio0_bytes"] > 0 and tx["port_xmit_data"] > 0


def test_all_sizes_in_mib(rack: Path) -> None:
    server = tool(rack, "h02", "ib_read_bw", "-p", "19412", "-a")
    wait_banner(server)
    client = tool(rack, "h01", "ib_read_bw", "-p", "19412", "-a", "127.0.0.1")
    out, err = client.communicate(timeout=30)
    server.communicate(timeout=30)
    result = parser.parse(out)
    assert client.returncode == 0, err
    assert result.unit == "MiB/sec" and [r.bytes for r in result.bw_rows] == [2**k for k in range(1, 24)]
    assert result.addresses[0].out_reads == 0x10


def test_invalid_gid_fails_the_rtr_transition(rack: Path) -> None:
    server = tool(rack, "h02", "ib_write_bw", "-p", "19413", "-x", "9")
    wait_banner(server)
    client = tool(rack, "h01", "ib_write_bw", "-p", "19413", "-x", "9", "127.0.0.1")
    out, err = client.communicate(timeout=30)
    server.communicate(timeout=30)
    assert client.returncode == 1 and server.returncode == 1
    assert parser.parse(out + err).error is not None
    assert " Unable to Connect the HCA's through the link" in err


def test_missing_server(rack: Path) -> None:
    client = tool(rack, "h01", "ib_write_bw", "-p", "19414", "127.0.0.1")
    out, err = client.communicate(timeout=30)
    assert client.returncode == 1
    assert err == ("Couldn't connect to 127.0.0.1:19414\n Unable to open file descriptor for socket "
                   "connection\n Unable to init the socket connection\n")
    result = parser.parse(out + err)
    assert result.error is not None and result.error.kind == "connect_failed"


@pytest.mark.parametrize("cm", [False, True])
def test_a_client_tries_its_server_once(rack: Path, cm: bool, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """perftest's ethernet_client_connect and rdma_client_connect try once (perftest_communication.c;
    retry_rdma_connect exists, but no test program calls it): a server not listening yet fails the
    client at once, with no wait for it to come up."""
    def no_wait(seconds: float) -> None:
        raise AssertionError(f"the client waited {seconds} s for its server")

    monkeypatch.setattr(perftest.time, "sleep", no_wait)
    argv = ["-p", "19415", *(["-R"] if cm else []), "127.0.0.1"]
    code = perftest.run("ib_write_bw", argv, NodeState.under(rack / "h01"), rack / "fabric")
    assert code == 1
    said = capsys.readouterr().err
    assert ("Unexpected CM event bl blka 8" if cm else "Couldn't connect to 127.0.0.1:19415") in said


def test_json_report_reads_back(rack: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    args = parse("ib_write_bw", ["--report_gbits", f"--out_json_file={report}", "h"])
    side = fmt.Side("h01", "mlx5_0", 0, "Ethernet", 0, "0" * 32, (1,), (2,), 3, 4, 4096)
    fmt.write_json_report(args, side, 3, [fmt.Row(65536, 5000, 390.0)])
    result = parser.parse_json(report.read_text())
    assert result.bw_rows[0].bw_average == 390.0 and result.header.gid_index == 3
