"""Journal (SQLite WAL) and the fabric lock (stale-lock takeover)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabtune.journal import Journal, JournalError
from fabtune.lock import LockedError, fabric_lock


def test_journal_records_intent_then_outcome(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite")
    run = j.open_run("tune", "rack", "inv.yml", "p.yml")
    seq = j.step(run, "move", "pfc", {"desired": {"pfc": [3]}})
    j.snapshot(run, seq, {"h01": {"pfc": []}, "h02": {"pfc": [4]}})
    assert [(s.name, s.state) for s in Journal(tmp_path / "j.sqlite").steps(run)] == [("pfc", "intent")]
    j.finish_step(run, seq, "kept")
    later = j.step(run, "move", "mtu", {})
    j.snapshot(run, later, {"h01": {"pfc": [3]}})
    assert j.first_snapshot(run) == {"h01": {"pfc": []}, "h02": {"pfc": [4]}}
    j.close_run(run, "done", {"kept": 1})
    assert j.run(run).state == "done" and j.run(run).summary == {"kept": 1}
    assert j._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(JournalError, match="no run 'nope'"):
        j.run("nope")


def test_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    with fabric_lock("rack", "tune", tmp_path) as note:
        assert note is None
        with (
            pytest.raises(LockedError, match=rf"pid {os.getpid()} \(tune"),
            fabric_lock("rack", "drift", tmp_path),
        ):
            pass
    with fabric_lock("rack", "tune", tmp_path) as note:
        assert note is None


def test_lock_of_a_killed_holder_is_taken_over(tmp_path: Path) -> None:
    code = (
        "import os, sys; from pathlib import Path; from fabtune.lock import fabric_lock\n"
        f"with fabric_lock('rack', 'tune', Path({str(tmp_path)!r})):\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    assert json.loads((tmp_path / "rack.lock").read_text())["purpose"] == "tune"
    with fabric_lock("rack", "tune", tmp_path) as note:
        assert note is not None and "stale" in note
