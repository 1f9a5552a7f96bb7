"""Output through a pipe is plain and whole (issue 14): full run ids, no wrapping, no markup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabtune import drift as lib
from fabtune.commands import _console
from fabtune.commands.drift import _print
from fabtune.journal import Journal

LONG = "/srv/clusters/" + "very-long-directory-name/" * 6 + "inventory.yml"


def _fabtune(*argv: str, home: Path) -> str:
    """Run the CLI with stdout a pipe, as ``fabtune ... | cat`` does."""
    env = {**os.environ, "FABTUNE_HOME": str(home), "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "fabtune", *argv], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return proc.stdout


@pytest.fixture
def run_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    return Journal().open_run("tune", "rack1", LONG, None)


def test_runs_and_show_print_whole_ids_and_paths_through_a_pipe(run_id: str, tmp_path: Path) -> None:
    listing = _fabtune("runs", home=tmp_path)
    assert any(run_id in line and "rack1" in line for line in listing.splitlines()), listing
    assert "…" not in listing
    shown = _fabtune("show", run_id, home=tmp_path)
    assert f"run {run_id}: tune on rack1 ({LONG})" in shown.splitlines()[0], shown
    assert "\x1b[" not in listing + shown  # no colour codes in a pipe


def test_drift_table_shows_list_values_that_look_like_markup(capsys: pytest.CaptureFixture[str]) -> None:
    tsa = ["ets"] * 8
    item = lib.DriftItem("h01", "nics.enp25s0np0.tsa", tsa, ["strict"] * 8)
    result = lib.DriftResult("rack1", "tuned desired state", lib.DriftReport(("h01",), (item,)))
    _print(result, _console.out())
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "tsa" in line)
    assert lib.show(tsa) in row and lib.show(["strict"] * 8) in row, out
