"""Fault matrix: a second run on a locked fabric, a stale lock, and a journal that is corrupted,
read-only or on a full disk. None of them may change a host; each says what happened."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.errors import ExitStatus
from fabtune.journal import Journal, default_path
from fabtune.lock import fabric_lock
from fabtune.testbed.spec import TestbedSpec
from tests.faults.rig import CLEAN, NO_MOVE, cli, current_state, drift_from, factory_rack, inventory, profile

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from factory_rack("flock", "10.245")


@pytest.fixture(scope="module")
def before(rack: TestbedSpec) -> dict[str, dict[str, object]]:
    return current_state(rack)


def _tune(
    rack: TestbedSpec, tmp: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return cli("tune", "-i", str(inventory(rack)), "--profile", str(profile(tmp, NO_MOVE)), env=env)


def _refused_cleanly(out: subprocess.CompletedProcess[str]) -> str:
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "Traceback" not in text and "unexpected" not in text, text
    return text


def test_second_tune_on_a_locked_fabric_is_refused_naming_the_holder(
    rack: TestbedSpec, before: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    runs = len(Journal().runs(500))
    with fabric_lock(rack.name, "tune"):
        out = _tune(rack, tmp_path)
    assert out.returncode == ExitStatus.LOCKED, out.stdout + out.stderr
    assert f"pid {os.getpid()} (tune" in out.stderr
    assert len(Journal().runs(500)) == runs  # no run was opened
    assert drift_from(before, rack) == CLEAN


def test_stale_lock_is_taken_over_and_said(
    rack: TestbedSpec, before: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    lock = Path(os.environ["FABTUNE_HOME"]) / "locks" / f"{rack.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": 2**22 + 1, "purpose": "tune", "since": 0}))  # a holder that died
    out = _tune(rack, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stale lock" in out.stdout + out.stderr
    run = Journal().runs(1)[0]
    assert run.state == "done"
    assert [s.name for s in Journal().steps(run.id) if s.kind == "lock"] == ["stale lock taken over"]
    assert drift_from(before, rack) == CLEAN


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "text"])
def test_corrupted_journal_is_named_and_no_host_is_touched(
    rack: TestbedSpec, before: dict[str, dict[str, object]], tmp_path: Path, damage: str
) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "FABTUNE_HOME": str(home)}
    assert cli("runs", env=env).returncode == 0  # a fresh, valid journal
    journal = home / "journal.sqlite"
    data = journal.read_bytes()
    journal.write_bytes(
        {
            "random bytes": os.urandom(len(data) or 4096),
            "truncated": data[:100],
            "text": b"not a journal\n" * 100,
        }[damage]
    )
    for wal in home.glob("journal.sqlite-*"):
        wal.unlink()
    text = _refused_cleanly(_tune(rack, tmp_path, env))
    assert str(journal) in text
    assert str(journal) in _refused_cleanly(cli("runs", env=env))
    assert drift_from(before, rack) == CLEAN


def test_read_only_journal_is_named_and_no_host_is_touched(
    rack: TestbedSpec, before: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    Journal().close()
    path = default_path()
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=10)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, timeout=10)
        text = _refused_cleanly(_tune(rack, tmp_path))
    finally:
        subprocess.run(["umount", str(path)], check=True, timeout=10)
    assert str(path) in text
    assert drift_from(before, rack) == CLEAN


def test_full_disk_is_named_and_no_host_is_touched(
    rack: TestbedSpec, before: dict[str, dict[str, object]], tmp_path: Path
) -> None:
    home = tmp_path / "full"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(home)], check=True, timeout=10)
    try:
        filler = subprocess.run(
            ["dd", "if=/dev/zero", f"of={home / 'filler'}", "bs=4k"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert b"No space left" in filler.stderr
        text = _refused_cleanly(_tune(rack, tmp_path, {**os.environ, "FABTUNE_HOME": str(home)}))
    finally:
        subprocess.run(["umount", str(home)], check=True, timeout=10)
    assert str(home) in text and ("space" in text or "full" in text), text
    assert drift_from(before, rack) == CLEAN
