"""bench/suite_playbooks.py: Ansible runs read from ansible-runner's artifact directories, by playbook."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.benchscript import load


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load("suite_playbooks")


def _artifact(root: Path, name: str, start: float, first: float | None, end: float | None) -> None:
    """One run's directory as ansible-runner leaves it: ``command`` at the start, ``status`` at the end."""
    directory = root / "home" / "ansible" / "artifacts" / name
    (directory / "job_events").mkdir(parents=True)
    (directory / "command").write_text("{}")
    os.utime(directory / "command", (start, start))
    if first is not None:
        created = datetime.fromtimestamp(first, UTC)
        (directory / "job_events" / "1-abc.json").write_text(json.dumps({"created": created.isoformat()}))
    if end is not None:
        (directory / "status").write_text("successful")
        os.utime(directory / "status", (end, end))


def test_runs_are_timed_from_command_to_status_with_their_start_up(
    script: ModuleType, tmp_path: Path
) -> None:
    _artifact(tmp_path, "20261205T065935-apply-12f25d", 1000.0, 1001.5, 1020.0)
    _artifact(tmp_path, "20261205T065936-bench_ib_write_bw-aa11bb", 2000.0, 2001.0, 2010.0)
    _artifact(tmp_path, "20261205T065937-apply-cc22dd", 3000.0, None, 3010.0)
    _artifact(tmp_path, "20261205T065938-facts-ee33ff", 4000.0, 4001.0, None)  # never finished
    runs = sorted(script.runs_under([tmp_path]), key=lambda r: r.wall_s)
    assert [(r.playbook, r.wall_s, r.startup_s) for r in runs] == [
        ("bench_ib_write_bw", 10.0, 1.0), ("apply", 10.0, None), ("apply", 20.0, 1.5)]
    table = script.table(runs)
    assert "| apply | 2 | 30 | 75% | 15.0 | 1.5 |" in table
    assert "| all | 3 | 40 | 100% | 10.0 | 1.2 |" in table


def test_no_run_found_is_an_error(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert script.main([str(tmp_path)]) == 1
    assert "no finished Ansible runs" in capsys.readouterr().err
