"""Emulated nccl-tests: arguments, the report layout and a two-rank job read by the parsers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabtune.perf.parsers import nccl_debug, nccl_tests
from fabtune.sim.model import SizeResult
from fabtune.sim.tools import TOOLS
from fabtune.sim.tools import _nccl_out as fmt
from fabtune.sim.tools import nccl_tests as tool
from tests.conftest import fixture_text

RUNNER = (
    "import os, sys; from pathlib import Path; from fabtune.sim.node import NodeState; "
    "from fabtune.sim.tools import nccl_tests as t; root = Path(sys.argv[2]); "
    "env = t.Env(NodeState.under(root), Path(sys.argv[3]), dict(os.environ), root / 'nccl.conf'); "
    "sys.exit(t.run_job(sys.argv[1], sys.argv[4:], env))"
)


def job(rack: Path, argv: list[str], env: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    """Two ranks (h01, h02) of one emulated mpirun job."""
    procs = []
    for rank, host in enumerate(("h01", "h02")):
        environ = dict(os.environ, OMPI_MCA_ess_base_jobid="4242", OMPI_COMM_WORLD_RANK=str(rank),
                       OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0", **(env or {}))
        cmd = [sys.executable, "-c", RUNNER, "all_reduce_perf", str(rack / host), str(rack / "fabric"), *argv]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=environ))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append((proc.returncode, out, err))
    return done


def test_tools_are_registered() -> None:
    assert {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf"} <= set(TOOLS)


def test_sizes_and_arguments() -> None:
    args = tool.parse("all_reduce_perf", ["-b", "8M", "-e", "128M", "-f", "2", "-g", "4"])
    assert tool.sizes(args) == [8 * 2**20 * 2**k for k in range(5)]
    assert tool.step_text(args) == "2(factor)" and args.gpus == 4
    assert tool.parse_size("1G") == 2**30 and tool.parse_size("x") == -1


def test_bad_size_and_unknown_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(tool.Done) as bad:
        tool.parse("all_reduce_perf", ["-b", "lots"])
    assert bad.value.code == 255
    assert capsys.readouterr().out == "invalid size specified for 'minbytes'\n"
    with pytest.raises(tool.Done) as unknown:
        tool.parse("all_reduce_perf", ["-q", "1"])
    assert unknown.value.code == 0
    assert capsys.readouterr().out.startswith("invalid option 'q'\nUSAGE: all_reduce_perf \n\t[-t,")


def test_float_str_falls_back_like_nccl_tests() -> None:
    assert fmt.float_str(35.153, 7) == "  35.15"
    assert fmt.float_str(11461.2, 7) == "11461.2"
    assert fmt.float_str(196284.4, 7) == " 196284"
    assert fmt.bus_id("0000:18:00.0") == "0000:18:00"


def test_row_layout_matches_current_util_cu() -> None:
    # formats.md §2.2 (current util.cu, "  %7s  %6s  %6s  %6g"); the deepep fixture is an older
    # build whose #wrong column is one narrower, so only its leading columns are compared.
    line = "        8192          2048     float     sum      -1    35.15    0.23    0.23       0    30.33" \
           "    0.27    0.27       0"
    mine = fmt.row(SizeResult(8192, 35.15, 0.23, 0.23), SizeResult(8192, 30.33, 0.27, 0.27), 2048,
                   "sum", True)
    assert mine == line
    older = fixture_text(
        "nccl-tests__all_reduce_perf_table_root_minus1_wrong0_newer_format_partial__deepep-issue303.txt"
    ).splitlines()[1]
    row = fmt.row(SizeResult(4, 12.49, 0.0, 0.0), SizeResult(4, 12.61, 0.0, 0.0), 1, "sum", True)
    assert row[:73] == older[:73]


def test_two_rank_job(rack: Path) -> None:
    (rank0, rank1) = job(rack, ["-b", "8M", "-e", "32M", "-f", "2", "-g", "4"], {"NCCL_DEBUG": "INFO"})
    assert rank0[0] == 0 and rank1[0] == 0, rank0[2] + rank1[2]
    table = nccl_tests.parse(rank0[1])
    assert len(table.devices) == 8 and [r.size_bytes for r in table.rows] == [2**23, 2**24, 2**25]
    assert table.devices[4].host == "h02" and table.collective == "all_reduce_perf"
    debug = nccl_debug.parse(rank0[1] + rank1[1])
    assert "NET/IB" in debug.transports and debug.gdrdma
    assert not list((rack / "fabric" / "jobs").iterdir())


def test_ib_disabled_in_nccl_conf_falls_back_to_sockets(rack: Path) -> None:
    (rack / "h02" / "nccl.conf").write_text("NCCL_IB_DISABLE=1\n")
    (rank0, rank1) = job(rack, ["-b", "1M", "-e", "1M", "-g", "2"], {"NCCL_DEBUG": "INFO"})
    assert rank0[0] == 0 and rank1[0] == 0
    assert "NCCL INFO NCCL_IB_DISABLE set by environment to 1." in rank1[1]
    debug = nccl_debug.parse(rank0[1] + rank1[1])
    assert debug.socket_fallback and "NET/Socket" in debug.transports


def test_a_host_whose_gid_index_names_its_roce_v1_gid_fails_with_completion_errors(rack: Path) -> None:
    """Index 2 is the RoCEv1 IPv4 GID (standard layout): its QPs never pair with the v2 peer's."""
    (rack / "h02" / "nccl.conf").write_text("NCCL_IB_GID_INDEX=2\n")
    (rank0, rank1) = job(rack, ["-b", "1M", "-e", "1M", "-g", "2"], {"NCCL_DEBUG": "INFO"})
    assert rank0[0] == 3 and rank1[0] == 3
    assert "NCCL INFO NCCL_IB_GID_INDEX set by environment to 2." in rank1[1]
    warns = [line for line in rank1[1].splitlines() if " NCCL WARN " in line]
    assert warns and warns[0].startswith("h02:")
    assert "with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.78.1.12 " \
           "remoteGids::ffff:10.78.1.11 hca mlx5_0" in warns[0]
    debug = nccl_debug.parse(rank1[1])
    assert debug.gid_index == 2 and debug.warnings[0].startswith("NET/IB : Got completion from peer")
    assert "Test NCCL failure" in rank0[1]
