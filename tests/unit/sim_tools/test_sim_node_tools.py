"""The read-only node tools against their real formats, and their failure modes."""

from __future__ import annotations

import os

import pytest

from fabtune.perf.parsers.ibstat import parse as parse_ibstat
from fabtune.sim import tools
from fabtune.sim.node import NodeState
from fabtune.sim.tools import (
    TOOLS,
    cma_roce,
    ethtool,
    ibdev2netdev,
    ibstat,
    ibv_devinfo,
    nvidia_smi,
    show_gids,
    sminfo,
)

from .conftest import fixture_lines

Capture = pytest.CaptureFixture[str]


def run(main: object, argv: list[str], state: NodeState, capsys: Capture) -> tuple[int, str, str]:
    code = main(argv, state=state)  # type: ignore[operator]
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dispatcher_names() -> None:
    assert set(TOOLS) >= {"mlnx_qos", "dcb", "ibdev2netdev", "show_gids", "ibstat", "ibstatus",
                          "ibv_devinfo", "nvidia-smi", "ethtool", "cma_roce_tos",
                          "cma_roce_mode", "sminfo"}


def test_nvidia_smi_topo_matches_sglang_fixture(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(nvidia_smi.main, ["topo", "-m"], roce, capsys)
    assert code == 0
    real = fixture_lines("nvidia-smi__topo_m_8xH100_8nic_full_with_legend__sglang-issue30401.txt")
    ours = [line.expandtabs(8).rstrip() for line in out.splitlines()]
    assert ours == [line.rstrip() for line in real]
    tabbed = fixture_lines("nvidia-smi__topo_m_hgx_h100_10nic_tabs_partial__nccl-issue1264.txt")
    assert out.splitlines()[1].split("\t")[-4:] == ["0-47,96-143", "0", "", "N/A"]
    assert tabbed[1].split("\t")[-3:] == ["0", "", "N/A"]
    assert out.splitlines()[9].endswith("\t\t\t\t")
    assert tabbed[9].endswith("\t\t\t\t")


def test_nvidia_smi_list_and_errors(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(nvidia_smi.main, ["-L"], roce, capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    code, out, _ = run(nvidia_smi.main, ["-q"], roce, capsys)
    assert code == 2
    assert "Invalid combination of input arguments" in out


def test_show_gids_format(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(show_gids.main, ["mlx5_0"], roce, capsys)
    assert code == 0
    real = fixture_lines("show_gids__roce_v1_v2_ipv4_tabs__husky.txt")
    lines = out.splitlines()
    assert lines[:2] == real[:2]
    assert lines[-1] == "n_gids_found=4"
    for ours, theirs in zip(lines[2:6], real[2:6], strict=True):
        assert [len(f) for f in ours.split("\t")] == [len(f) for f in theirs.split("\t")] or \
            ours.count("\t") == theirs.count("\t")
    assert lines[4] == ("mlx5_0\t1\t2\t0000:0000:0000:0000:0000:ffff:0a4e:010b\t10.78.1.11  "
                        "\tv1\tens1np0")
    _, out, _ = run(show_gids.main, [], roce, capsys)
    assert out.splitlines()[-1] == "n_gids_found=32"


def test_ibdev2netdev(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(ibdev2netdev.main, [], roce, capsys)
    assert code == 0
    assert out.splitlines()[0] == "mlx5_0 port 1 ==> ens1np0 (Up)"
    code, _, err = run(ibdev2netdev.main, ["-x"], roce, capsys)
    assert code == 1
    assert err.startswith("Usage:")


def test_ibstat_roce_matches_fixture(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(ibstat.main, ["mlx5_0"], roce, capsys)
    assert code == 0
    real = fixture_lines("ibstat__roce_cx7_200g_ethernet_link_layer_partial__mooncake-issue1999"
                         ".txt")[1:18]
    ours = [line.expandtabs(8) for line in out.splitlines()]
    assert len(ours) == len(real)
    for mine, theirs in zip(ours, real, strict=True):
        assert mine.split(":")[0] == theirs.split(":")[0]
    assert ours[10] == "                Rate: 400"
    assert "\t\tCapability mask: 0x00010000" in out


def test_ibstat_ib_and_errors(ib: NodeState, capsys: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    _, out, _ = run(ibstat.main, [], ib, capsys)
    assert "\t\tBase lid: 5\n" in out
    assert "\t\tSM lid: 1\n" in out
    assert "\t\tPort GUID: 0x9c63c00300554000\n" in out
    _, out, _ = run(ibstat.main, ["-l"], ib, capsys)
    assert out == "mlx5_0\nmlx5_1\n"
    # ibstat CA PORT: "CA: 'name'" then the port unindented (rdma-core infiniband-diags/ibstat.c)
    _, out, _ = run(ibstat.main, ["mlx5_1", "1"], ib, capsys)
    assert out.splitlines()[:3] == ["CA: 'mlx5_1'", "Port 1:", "State: Active"]
    parsed = parse_ibstat(out)
    assert parsed.ca("mlx5_1").ports[0].state == "Active" and parsed.ca("mlx5_1").ports[0].lmc == 0
    code, out, err = run(ibstat.main, ["mlx5_1", "2"], ib, capsys)
    assert (code, out) == (0, "")  # ca_stat() only warns
    assert "ca_stat: CA: 'mlx5_1' has no port number 2 - max (1)" in err
    code, _, err = run(ibstat.main, ["mlx5_8"], ib, capsys)
    assert code == 255
    assert err == (f"ibpanic: [{os.getpid()}] main: stat of IB device 'mlx5_8' failed: "
                   "No such file or directory\n")
    # run by the tool server's child for a launcher: the pid is the launcher's, the one its caller started
    monkeypatch.setitem(tools._LAUNCHER, "pid", 4242)
    _, _, err = run(ibstat.main, ["mlx5_1", "2"], ib, capsys)
    assert err.startswith("ibwarn: [4242] ca_stat: CA: 'mlx5_1' has no port number 2")
    code, _, _ = run(ibstat.main, ["-q"], ib, capsys)
    assert code == 2


def test_ibstatus(ib: NodeState, capsys: Capture) -> None:
    code, out, _ = run(ibstat.ibstatus_main, ["mlx5_0"], ib, capsys)
    assert code == 0
    assert out.splitlines()[:3] == [
        "Infiniband device 'mlx5_0' port 1 status:",
        "\tdefault gid:\t fe80:0000:0000:0000:9c63:c003:0055:4000",
        "\tbase lid:\t 0x5"]
    assert "\trate:\t\t 400 Gb/sec (4X NDR)\n" in out
    code, out, _ = run(ibstat.ibstatus_main, ["mlx5_9"], ib, capsys)
    assert code == 255
    assert out.startswith("Fatal error:")


def test_ibv_devinfo_matches_fixture(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(ibv_devinfo.main, ["-d", "mlx5_0"], roce, capsys)
    assert code == 0
    real = fixture_lines("ibv_devinfo__roce_cx7_partial__deepep-issue38.txt")
    ours = [line.expandtabs(8) for line in out.splitlines()]
    for mine, theirs in zip(ours, real, strict=False):
        label = theirs.split(":")[0]
        assert mine.startswith(label + ":")
        value_col = len(theirs) - len(theirs.split(":", 1)[1].lstrip())
        assert len(mine) - len(mine.split(":", 1)[1].lstrip()) == value_col
    assert "\t\t\tactive_mtu:\t\t4096 (5)\n" in out
    code, _, err = run(ibv_devinfo.main, ["-d", "mlx5_99"], roce, capsys)
    assert (code, err) == (255, "IB device 'mlx5_99' wasn't found\n")


@pytest.mark.parametrize(("mtu", "expected"), [(1500, (1024, 3)), (4200, (4096, 5)),
                                               (9000, (4096, 5)), (2200, (2048, 4))])
def test_active_mtu(mtu: int, expected: tuple[int, int]) -> None:
    assert ibv_devinfo.active_mtu("Ethernet", mtu) == expected
    assert ibv_devinfo.active_mtu("InfiniBand", 1500) == (4096, 5)


def test_ethtool(roce: NodeState, capsys: Capture) -> None:
    roce.add_counters("ens1np0", {"rx_prio3_pause": 12})
    code, out, _ = run(ethtool.main, ["-S", "ens1np0"], roce, capsys)
    assert code == 0
    assert out.startswith("NIC statistics:\n     rx_packets: 0\n")
    assert "     rx_prio3_pause: 12\n" in out
    code, out, _ = run(ethtool.main, ["-i", "ens1np0"], roce, capsys)
    assert out.splitlines()[0] == "driver: mlx5_core"
    code, _, err = run(ethtool.main, ["-S", "eth9"], roce, capsys)
    assert (code, err) == (94, "Cannot get stats strings information: No such device\n")
    code, _, err = run(ethtool.main, ["-S"], roce, capsys)
    assert code == 1
    assert err.startswith("ethtool: bad command line argument(s)")


def test_cma_roce(roce: NodeState, capsys: Capture) -> None:
    code, out, _ = run(cma_roce.tos_main, ["-d", "mlx5_0", "-t", "106"], roce, capsys)
    assert (code, out) == (0, "106\n")
    assert roce.get_roce_tos("mlx5_0") == 106
    code, out, _ = run(cma_roce.mode_main, ["-d", "mlx5_1", "-m", "1"], roce, capsys)
    assert (code, out) == (0, "IB/RoCE v1\n")
    code, out, _ = run(cma_roce.mode_main, ["-d", "mlx5_1"], roce, capsys)
    assert out == "IB/RoCE v1\n"
    code, out, _ = run(cma_roce.mode_main, ["-d", "mlx5_42"], roce, capsys)
    assert (code, out) == (1, "Failed to create configuration for mlx5_42\n")
    code, out, _ = run(cma_roce.tos_main, ["-d", "mlx5_0", "-p", "2"], roce, capsys)
    assert (code, out) == (1, "Device mlx5_0 port 2 does not exist\n")


def test_sminfo(ib: NodeState, capsys: Capture) -> None:
    code, _, err = run(sminfo.main, [], ib, capsys)
    assert (code, err) == (255, "sminfo: iberror: failed: query\n")
    (ib.layout.emu / "sm.json").write_text(
        '{"lid": 1, "guid": "0x248a0703005c3c30", "activity": 1234, "priority": 15, "state": 3}')
    code, out, _ = run(sminfo.main, [], ib, capsys)
    assert code == 0
    assert out == ("sminfo: sm lid 1 sm guid 0x248a0703005c3c30, activity count 1234 "
                   "priority 15 state 3 SMINFO_MASTER\n")
