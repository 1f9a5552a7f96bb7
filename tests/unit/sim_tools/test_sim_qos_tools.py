"""mlnx_qos and dcb: the real formats, the real errors, and one shared state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.sim.node import NodeState
from fabtune.sim.tools import dcb, mlnx_qos

from .conftest import fixture_lines

IF = "ens1np0"


def run(tool: object, argv: list[str], state: NodeState,
        capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = tool.main(argv, state=state)  # type: ignore[attr-defined]
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_mlnx_qos_default_output(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(mlnx_qos, ["-i", IF], roce, capsys)
    assert code == 0
    lines = out.splitlines()
    # mlnx-tools v25.07.0: no "default priority:" lines (removed with --defltprio, 374d9b5)
    assert lines[:3] == ["DCBX mode: OS controlled", "Priority trust state: pcp",
                         "Receive buffer size (bytes): 262016,0,0,0,0,0,0,0,"
                         "max_buffer_size=262016"]
    assert lines[3:7] == ["Cable len: 7", "PFC configuration:",
                          "\tpriority    0   1   2   3   4   5   6   7",
                          "\tenabled     0   0   0   0   0   0   0   0   "]
    assert lines[8:11] == ["tc: 0 ratelimit: unlimited, tsa: ets, bw: 12%", "\t priority:  1",
                           "tc: 1 ratelimit: unlimited, tsa: ets, bw: 12%"]


def test_mlnx_qos_pfc_persists(roce: NodeState, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(mlnx_qos, ["-i", IF, "--pfc", "0,0,0,1,0,0,0,0"], roce, capsys)
    assert code == 0
    fresh = NodeState.under(tmp_path)
    assert fresh.get_pfc(IF).enabled == (0, 0, 0, 1, 0, 0, 0, 0)
    code, out, _ = run(mlnx_qos, ["-i", IF], fresh, capsys)
    assert code == 0
    assert "\tenabled     0   0   0   1   0   0   0   0   \n" in out
    assert "\tbuffer      0   0   0   1   0   0   0   0   \n" in out
    # the same lines as the spiderpool capture of a real mlnx_qos (PFC on priority 5 there)
    real = fixture_lines("mlx5-sysfs__ecn_enable_cnp_dscp_traffic_class_via_script_with_"
                         "mlnx_qos_excerpt__spiderpool.txt")
    assert real[4].lstrip() == "priority    0   1   2   3   4   5   6   7"
    assert out.splitlines()[5] == "\t" + real[4].lstrip()


def test_mlnx_qos_pfc_errors(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(mlnx_qos, ["-i", IF, "--pfc", "1,0"], roce, capsys)
    assert (code, out) == (1, "pfc list must have 8 items\n")
    # the real parse_int rejects the 2 before counting items
    code, out, _ = run(mlnx_qos, ["-i", IF, "--pfc", "1,2"], roce, capsys)
    assert code == 1
    assert out == ("Bad value for PFC: 2 is not in the range 0..1\n"
                   "Usage: mlnx_qos -i <interface> [options]\n\n")
    assert roce.get_pfc(IF).enabled == (0,) * 8
    code, out, _ = run(mlnx_qos, ["-i", IF, "--pfc", "1,0,0,0,0,0,0,0,1"], roce, capsys)
    assert (code, out) == (1, "Too many items for PFC\n")


def test_mlnx_qos_usage_errors(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(mlnx_qos, [], roce, capsys)
    assert (code, out) == (1, "Interface name is required\n"
                              "Usage: mlnx_qos -i <interface> [options]\n\n")
    code, _, err = run(mlnx_qos, ["-i", IF, "--bogus"], roce, capsys)
    assert code == 2
    assert "mlnx_qos: error: no such option: --bogus" in err
    code, out, _ = run(mlnx_qos, ["-i", "eth9"], roce, capsys)
    assert code == 1
    assert out.splitlines()[-1] == "ETS features are not supported on your system"
    code, out, _ = run(mlnx_qos, ["-i", IF, "--trust", "dscp", "--dscp2prio", "set,1,1"],
                       roce, capsys)
    assert (code, out) == (1, "trust and dscp2prio commands cannot be used at the same time.\n")
    # the script's sys.exit(1) for a DSCP over 63 escapes its `except Exception`: no message
    code, out, _ = run(mlnx_qos, ["-i", IF, "--dscp2prio", "set,99,1"], roce, capsys)
    assert (code, out) == (1, "")
    code, out, _ = run(mlnx_qos, ["-i", IF, "--dscp2prio", "set,x,1"], roce, capsys)
    assert (code, out) == (1, "Invalid dscp2prio command. Refer to the help.\n")
    code, _, err = run(mlnx_qos, ["-i", IF, "--defltprio", "set,3"], roce, capsys)
    assert code == 2 and "no such option: --defltprio" in err  # gone in v25.07.0
    code, out, _ = run(mlnx_qos, ["-i", IF, "-s", "ets,ets,ets,ets,ets,ets,ets,fast"],
                       roce, capsys)
    assert out.startswith("('Bad TSA value: ', 'fast')\n")


def test_mlnx_qos_trust_dscp_matches_fixture(roce: NodeState,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(mlnx_qos, ["-i", IF, "--trust", "dscp"], roce, capsys)
    assert code == 0
    real = fixture_lines("mlnx_qos__dscp_trust_os_dcbx_partial_head__husky.txt")
    assert out.splitlines()[:len(real)] == real


def test_mlnx_qos_ets(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-i", IF, "-p", "0,0,0,1,0,0,0,0", "-s", "ets,ets,strict,strict,strict,strict,"
            "strict,strict", "-t", "50,50,0,0,0,0,0,0"]
    code, out, _ = run(mlnx_qos, argv, roce, capsys)
    assert code == 0
    assert "tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%\n\t priority:  0\n\t priority:  1\n" \
        in out
    assert "tc: 1 ratelimit: unlimited, tsa: ets, bw: 50%\n\t priority:  3\n" in out
    code, out, _ = run(mlnx_qos, ["-i", IF, "-t", "50,50,0,0,0,0,0,1"], roce, capsys)
    assert code == 1
    assert out.startswith("ETS BW for a strict/vendor TC must be 0\n")


def test_dcb_pfc_show_format(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(dcb, ["pfc", "set", "dev", IF, "prio-pfc", "all:off", "6:on", "7:on",
                             "delay", "0x1000"], roce, capsys)
    assert (code, out) == (0, "")
    code, out, _ = run(dcb, ["pfc", "show", "dev", IF], roce, capsys)
    real = fixture_lines("dcb__pfc_set_show_manpage_example__iproute2.txt")[-2:]
    assert [line.rstrip() for line in out.splitlines()] == real


def test_dcb_and_mlnx_qos_share_state(roce: NodeState,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    run(mlnx_qos, ["-i", IF, "--pfc", "0,0,0,1,0,0,0,0"], roce, capsys)
    _, out, _ = run(dcb, ["pfc", "show", "dev", IF, "prio-pfc"], roce, capsys)
    assert out == "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off \n"
    run(dcb, ["pfc", "set", "dev", IF, "prio-pfc", "3:off", "5:on"], roce, capsys)
    run(dcb, ["app", "add", "dev", IF, "dscp-prio", "26:5"], roce, capsys)
    _, out, _ = run(mlnx_qos, ["-i", IF], roce, capsys)
    assert "\tenabled     0   0   0   0   0   1   0   0   \n" in out
    assert "Priority trust state: dscp\n" in out
    # more than 8 DSCPs on a priority wrap as in the real print_dscp2prio
    assert "\tprio:5 dscp:47,46,45,44,43,42,41,40,\n\tprio:5 dscp:26,\n" in out
    _, out, _ = run(dcb, ["-j", "app", "show", "dev", IF, "dscp-prio"], roce, capsys)
    assert json.loads(out) == {"dscp_prio": [[26, 5]]}  # the one entry added, as mlx5 lists it


def test_dcb_ets_and_app_formats(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    run(dcb, ["ets", "set", "dev", IF, "prio-tc", "0:0", "1:1", "2:2", "3:3", "4:4", "5:5",
              "6:6", "7:7"], roce, capsys)
    code, _, err = run(dcb, ["ets", "set", "dev", IF, "tc-tsa", "all:strict", "0:ets", "1:ets",
                             "2:ets", "tc-bw", "all:0", "0:33", "1:33", "2:34"], roce, capsys)
    assert (code, err) == (0, "")
    _, out, _ = run(dcb, ["ets", "show", "dev", IF, "prio-tc", "tc-tsa", "tc-bw"], roce, capsys)
    real = fixture_lines("dcb__ets_set_show_manpage_example__iproute2.txt")[-3:]
    assert [line.rstrip() for line in out.splitlines()] == real
    _, out, _ = run(dcb, ["ets", "show", "dev", IF], roce, capsys)
    assert out.splitlines()[0] == "willing off ets-cap 8 cbs off "
    run(dcb, ["app", "add", "dev", IF, "dscp-prio", "24:3", "CS6:6"], roce, capsys)
    _, out, _ = run(dcb, ["app", "show", "dev", IF, "dscp-prio"], roce, capsys)
    assert "CS3:3 " in out
    assert " 48:6 " not in out
    _, out, _ = run(dcb, ["-N", "app", "show", "dev", IF, "dscp-prio"], roce, capsys)
    assert " 24:3 " in out
    assert " 48:6 " in out
    run(dcb, ["app", "flush", "dev", IF, "dscp-prio"], roce, capsys)
    _, out, _ = run(dcb, ["app", "show", "dev", IF], roce, capsys)
    assert out == ""
    assert roce.get_trust(IF) == "pcp"


def test_dcb_json(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(dcb, ["-j", "pfc", "show", "dev", IF], roce, capsys)
    data = json.loads(out)
    assert data == {"pfc_cap": 8, "macsec_bypass": False, "delay": 7, "prio_pfc": [False] * 8}
    _, out, _ = run(dcb, ["-j", "-p", "buffer", "show", "dev", IF], roce, capsys)
    assert json.loads(out)["total_size"] == 262016
    assert out.startswith("{\n    ")


def test_dcb_buffer_maxrate(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    run(dcb, ["buffer", "set", "dev", IF, "prio-buffer", "0:0", "3:1"], roce, capsys)
    run(dcb, ["buffer", "set", "dev", IF, "buffer-size", "all:10K", "1:100K"], roce, capsys)
    _, out, _ = run(dcb, ["buffer", "show", "dev", IF], roce, capsys)
    assert out.splitlines()[:2] == [
        "prio-buffer 0:0 1:0 2:0 3:1 4:0 5:0 6:0 7:0 ",
        "buffer-size 0:10Kb 1:100Kb 2:10Kb 3:10Kb 4:10Kb 5:10Kb 6:10Kb 7:10Kb "]
    run(dcb, ["maxrate", "set", "dev", IF, "tc-maxrate", "all:25Gbit", "6:100Gbit"], roce, capsys)
    _, out, _ = run(dcb, ["maxrate", "show", "dev", IF], roce, capsys)
    real = fixture_lines("dcb__maxrate_set_show_manpage_example__iproute2.txt")[-1]
    assert out.rstrip() == real
    _, out, _ = run(mlnx_qos, ["-i", IF], roce, capsys)
    assert "tc: 6 ratelimit: 100.0 Gbps, tsa: ets, bw: 13%" in out


def test_dcb_errors(roce: NodeState, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(dcb, ["pfc", "show", "dev", "eth9"], roce, capsys)
    assert (code, err) == (1, "Attribute read: No such device\n")
    code, _, err = run(dcb, ["pfc", "set", "dev", IF, "bogus", "1"], roce, capsys)
    assert code == 1
    assert err.startswith('What is "bogus"?\n')
    code, _, err = run(dcb, ["pfc", "set", "dev", IF, "delay"], roce, capsys)
    assert (code, err) == (255, 'Command line is not complete. Try option "help"\n')
    code, _, err = run(dcb, ["frob", "show"], roce, capsys)
    assert (code, err) == (1, 'Object "frob" is unknown\n')
    code, _, err = run(dcb, ["pfc", "set", "dev", IF, "prio-pfc", "9:on"], roce, capsys)
    assert code == 1
    assert "PRIO is expected to be 0..7" in err
    code, _, err = run(dcb, ["ets", "set", "dev", IF, "tc-bw", "0:50"], roce, capsys)
    assert code == 1
    assert "Bandwidth percentages in tc-bw sum to" in err
    code, _, err = run(dcb, ["app", "add", "dev", IF, "port-prio", "80:1"], roce, capsys)
    assert (code, err) == (1, "Attribute write: Invalid argument\n")  # mlx5: DSCP entries only
    code, _, err = run(dcb, ["apptrust", "set", "dev", IF, "order", "port", "pcp"], roce, capsys)
    assert (code, err) == (1, 'Object "apptrust" is unknown\n')  # 6.1.0
    code, _, err = run(dcb, ["-Z"], roce, capsys)
    assert code == 1
    assert "Unknown option." in err
