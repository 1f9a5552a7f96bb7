"""One output convention (issue 14): ``--json`` prints the JSON document on stdout and nothing
else goes there; ``-o FILE`` writes it to FILE; ``-o -`` is stdout. The retired ``--json PATH``
form is refused with the option to use instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fabtune.cli import cli
from fabtune.commands._common import ResultOutput
from fabtune.commands.parse import parse
from fabtune.journal import Journal
from fabtune.perf.checks import CheckResult
from fabtune.state import HostState

PERFTEST = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs     : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             97.50              97.42              0.185814
---------------------------------------------------------------------------------------
"""


def _fabtune(*argv: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout a pipe (not a terminal), as a script runs it."""
    env = {**os.environ, "FABTUNE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "fabtune", *argv], env=env, capture_output=True,
                          text=True, timeout=60, check=False, cwd=cwd)


@pytest.fixture
def run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    journal = Journal()
    found = journal.open_run("drift", "rack1", "/srv/inv.yml", None)
    journal.step(found, "check", "drift check", {"why": "[ets, ets] is data"})
    journal.close()
    return found


def test_runs_and_show_json_is_the_only_thing_on_stdout(run_id: str, tmp_path: Path) -> None:
    listed = _fabtune("runs", "--json", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)  # the whole of stdout is one JSON document
    assert doc["kind"] == "runs" and [r["id"] for r in doc["runs"]] == [run_id]
    shown = _fabtune("show", run_id[:12], "--json", home=tmp_path)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["run"]["id"] == run_id and doc["steps"][0]["payload"]["why"] == "[ets, ets] is data"


def test_output_file_keeps_the_table_on_stdout_and_dash_is_stdout(run_id: str, tmp_path: Path) -> None:
    target = tmp_path / "runs.json"
    done = _fabtune("runs", "-o", str(target), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run_id in done.stdout and not done.stdout.lstrip().startswith("{")  # the table a person reads
    assert json.loads(target.read_text())["runs"][0]["id"] == run_id
    dash = _fabtune("runs", "--output", "-", home=tmp_path, cwd=tmp_path)
    assert json.loads(dash.stdout)["runs"][0]["id"] == run_id
    assert not (tmp_path / "-").exists()


def _fake_checks(*_args: Any, **_kwargs: Any) -> list[CheckResult]:
    return [CheckResult("transport", "h01", "pass", "NET/IB", "[ets, ets]")]


def test_check_json_dash_prints_json_and_writes_no_file_named_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    monkeypatch.setattr("fabtune.commands.check.run_checks", _fake_checks)
    monkeypatch.chdir(tmp_path)
    for argv in (["--json"], ["--json", "-"], ["-o", "-"]):
        result = CliRunner().invoke(cli, ["check", "-i", str(inventory), *argv])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["results"][0]["evidence"] == "[ets, ets]", argv
        assert not (tmp_path / "-").exists()
    result = CliRunner().invoke(cli, ["check", "-i", str(inventory), "-o", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    assert "transport" in result.stdout and "{" not in result.stdout
    assert json.loads((tmp_path / "c.json").read_text())["kind"] == "check"


@pytest.mark.parametrize("verb", [["check"], ["bench", "pairs"], ["bootstrap", "--profile", "roce"],
                                  ["drift"]])
def test_the_retired_json_path_form_is_refused_naming_the_option_to_use(
    verb: list[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    result = CliRunner().invoke(cli, [*verb, "-i", str(inventory), "--json", "out.json"])
    assert result.exit_code == 2, result.output
    assert "-o out.json" in result.output
    assert not (tmp_path / "out.json").exists()


def test_parse_json_and_output_file(tmp_path: Path) -> None:
    shown = CliRunner().invoke(parse, ["ib_write_bw", "-", "--json"], input=PERFTEST)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["header"]["device"] == "mlx5_0"
    target = tmp_path / "bw.json"
    written = CliRunner().invoke(parse, ["ib_write_bw", "-", "-o", str(target)], input=PERFTEST)
    assert written.exit_code == 0, written.output
    assert "mlx5_0" in written.stdout and not written.stdout.startswith("{")
    assert json.loads(target.read_text())["bw_rows"][0]["bw_average"] == 97.42


def test_tune_refuses_the_event_stream_and_the_result_on_stdout_together(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    result = CliRunner().invoke(cli, ["tune", "-i", str(inventory), "--jsonl", "--json"])
    assert result.exit_code == 2, result.output
    assert "--jsonl" in result.output and "-o FILE" in result.output


def test_a_result_holding_host_states_writes_them_as_their_trees(tmp_path: Path) -> None:
    """``fabtune tune --json``'s result carries each host's tuned HostState (frozen mappings): the
    document holds the plain tree, as the journal does (found by the clean-clone run: it raised)."""
    tree = {"nics": {"eth2": {"mtu": 4200, "pfc": [3]}}, "nccl": {"NCCL_IB_TC": "106"}}
    target = tmp_path / "result.json"
    ResultOutput(target).write({"kind": "tune", "result": {"desired": {"h01": HostState.from_tree(tree)}}})
    assert json.loads(target.read_text())["result"]["desired"] == {"h01": tree}
