"""`fabtune testbed` without --name: status lists the testbeds, the others take the only one (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    return tmp_path


def _testbed(home: Path, name: str, fabric: str = "roce") -> Path:
    folder = home / "testbeds" / name
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"spec": {"name": name, "fabric": fabric, "hosts": 2}}))
    (folder / "inventory.yml").write_text("all: {}\n")
    return folder


def test_status_without_a_name_lists_every_testbed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _testbed(home, "demo")
    _testbed(home, "ib2", "ib")
    assert main(["testbed", "status"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "ib2" in out and str(home / "testbeds" / "ib2" / "inventory.yml") in out


def test_a_verb_without_a_name_takes_the_only_testbed(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _testbed(home, "demo")
    assert main(["testbed", "inventory"]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "inventory.yml")


@pytest.mark.parametrize("names", [(), ("demo", "ib2")])
def test_without_a_name_and_not_one_testbed_the_error_names_what_exists(
    home: Path, names: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    for name in names:
        _testbed(home, name)
    assert main(["testbed", "down"]) == ExitStatus.TESTBED
    err = capsys.readouterr().err
    assert all(n in err for n in names) and ("several" in err if names else "no testbed is up" in err)
    assert all((home / "testbeds" / n / "state.json").exists() for n in names)  # nothing removed


def test_status_of_an_unknown_name_lists_the_known(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _testbed(home, "demo")
    assert main(["testbed", "status", "--name", "fab"]) == ExitStatus.TESTBED
    assert "testbeds here: demo" in capsys.readouterr().err


def test_demo_refuses_options_without_a_tune_section_before_building(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = tmp_path / "options.yml"
    options.write_text("fabtune_tnue: {max_runs: 4}\n")  # misspelled: no fabtune_tune section
    assert main(["demo", "--profile", str(options)]) == ExitStatus.CONFIG
    assert "fabtune_tnue" in capsys.readouterr().err
    assert not (home / "testbeds").exists()  # refused before any rack was built
