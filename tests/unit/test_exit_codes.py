"""Exit codes come from exceptions mapped in cli.main alone: a failed check, a testbed's hosts not
all up, and the status of a command run on a testbed host passed on without an error line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.perf.checks import CheckResult


def test_a_failed_check_exits_7_naming_the_check_and_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    results = [CheckResult("transport", "h01", "pass", "NET/IB"),
               CheckResult("gid", "h02", "fail", "no RoCEv2")]
    monkeypatch.setattr("fabtune.commands.check.run_checks", lambda *_a, **_k: results)
    assert main(["check", "-i", str(inventory)]) == ExitStatus.CHECK_FAILED
    captured = capsys.readouterr()
    assert "no RoCEv2" in captured.out  # the table is still shown
    assert "1 check(s) failed: gid on h02" in captured.err


@pytest.mark.parametrize("status", [0, 3, 255])
def test_testbed_ssh_passes_on_the_remote_status_without_an_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    verbs = pytest.importorskip("fabtune.testbed.verbs")
    monkeypatch.setattr(verbs, "ssh_argv", lambda *_a, **_k: ["ssh", "h01"])

    def run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, status)

    monkeypatch.setattr(verbs.subprocess, "run", run)
    assert main(["testbed", "ssh", "--name", "rack", "h01", "false"]) == status
    assert capsys.readouterr().err == ""
