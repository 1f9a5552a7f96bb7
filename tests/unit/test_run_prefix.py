"""Run ids accept any unique start of one, as `fabtune runs` shows them (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.journal import Journal


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Journal:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    return Journal()


def test_a_unique_prefix_names_the_run(journal: Journal, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = journal.open_run("tune", "rack1", "/inv.yml", None)
    assert journal.resolve(run_id[:15]) == run_id
    assert main(["show", run_id[:17]]) == 0
    assert f"run {run_id}:" in capsys.readouterr().out


def test_an_ambiguous_prefix_names_the_candidates(
    journal: Journal, capsys: pytest.CaptureFixture[str]
) -> None:
    first = journal.open_run("tune", "rack1", "/inv.yml", None)
    second = journal.open_run("drift", "rack1", "/inv.yml", None)
    common = first[:9]
    assert second.startswith(common)
    assert main(["report", common]) == ExitStatus.CONFIG
    err = capsys.readouterr().err
    assert "ambiguous" in err and first in err and second in err


@pytest.mark.parametrize("text", ["2099", "20261301-99", "x'; drop table runs; --", "../../etc"])
def test_no_match_or_no_id_is_one_error(
    journal: Journal, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    journal.open_run("tune", "rack1", "/inv.yml", None)
    assert main(["show", text]) == ExitStatus.CONFIG
    assert repr(text) in capsys.readouterr().err
