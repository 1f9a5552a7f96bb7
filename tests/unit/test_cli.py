"""The CLI maps errors to exit codes in one place, with one clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus


def test_version() -> None:
    assert main(["--version"]) == 0


def test_unknown_verb_is_a_usage_error() -> None:
    assert main(["frobnicate"]) == ExitStatus.USAGE


def test_bad_spec_exits_config_and_names_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "rack.yml"
    spec.write_text("hosts: 99\nfabric: roce\n")
    assert main(["testbed", "up", "--spec", str(spec)]) == ExitStatus.CONFIG
    err = capsys.readouterr().err
    assert "hosts: 99 must be an integer from 2 to 32" in err
    assert "Traceback" not in err


def test_missing_testbed_is_a_testbed_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    assert main(["testbed", "inventory", "--name", "nope"]) == ExitStatus.TESTBED
    assert main(["testbed", "ssh", "--name", "nope", "h01", "true"]) == ExitStatus.TESTBED


def test_an_unusable_home_is_one_error_naming_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    monkeypatch.setenv("FABTUNE_HOME", str(blocker / "home"))  # below a file: nothing can be made there
    assert main(["runs"]) == ExitStatus.ERROR
    err = capsys.readouterr().err
    assert str(blocker / "home") in err and "Traceback" not in err


def test_an_errors_bracketed_evidence_is_printed_as_text() -> None:
    import io

    from rich.console import Console

    from fabtune.cli import _report
    from fabtune.errors import FabtuneError

    buffer = io.StringIO()
    _report(FabtuneError("h02: transport: RoCEv1 GID [mlx5_0 1 2 0000:ffff v1 eth2]"), Console(file=buffer))
    assert buffer.getvalue() == "error: h02: transport: RoCEv1 GID [mlx5_0 1 2 0000:ffff v1 eth2]\n"
