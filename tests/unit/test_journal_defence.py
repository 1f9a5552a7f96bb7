"""The journal survives: damaged, read-only and full journals give one clear error naming the file,
backups are made before each run and restore, dead owners read as interrupted, every failure is
journaled, and an unknown run id is bad input (exit 3)."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fabtune import rollback as rollbacks
from fabtune.ansible import RunOutcome, TaskResult
from fabtune.cli import main
from fabtune.errors import ExitStatus
from fabtune.inventory import InventoryInfo
from fabtune.journal import BACKUPS_KEPT, Journal, JournalError
from fabtune.tune import run as tune_run

OLD_RUN = "20240101-000000-abcdef"
# The schema before the owning process was journaled (a journal written by an older fabtune).
OLD_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, fabric TEXT NOT NULL, inventory TEXT NOT NULL,
    profile TEXT, state TEXT NOT NULL, started REAL NOT NULL, ended REAL, summary TEXT);
INSERT INTO runs VALUES
    ('20240101-000000-abcdef', 'tune', 'rack', 'inv.yml', NULL, 'running', 1.0, NULL, '{}');
"""


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path))
    return tmp_path


def a_journal(path: Path, runs: int = 3) -> list[str]:
    journal = Journal(path)
    ids = []
    for n in range(runs):
        run_id = journal.open_run("tune", "rack", "inv.yml", None)
        seq = journal.step(run_id, "move", f"move {n}", {"pad": "x" * 4000})
        journal.snapshot(run_id, seq, {"h01": {"nics": {"eth2": {"mtu": 1500}}}})
        ids.append(run_id)
    journal.close()
    return ids


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "random bytes":
        path.write_bytes(os.urandom(len(data)))
    else:
        path.write_text("this is not a journal\n" * 100)


@pytest.mark.parametrize("how", ["truncated", "random bytes", "text"])
@pytest.mark.parametrize("verb", [["runs"], ["show", OLD_RUN], ["rollback", OLD_RUN]])
def test_a_damaged_journal_is_one_error_naming_the_file_and_the_way_out(
    home: Path, capsys: pytest.CaptureFixture[str], how: str, verb: list[str]
) -> None:
    path = home / "journal.sqlite"
    a_journal(path)
    damage(path, how)
    assert main(verb) == ExitStatus.ERROR
    err = " ".join(capsys.readouterr().err.split())
    assert str(path) in err and "damaged" in err and "Traceback" not in err
    assert "restore it from" in err and str(home / "backups") in err  # the newest backup, by path
    assert "fabtune rollback RUN -i INVENTORY --from-hosts" in err


def test_a_backup_restores_a_damaged_journal(home: Path) -> None:
    path = home / "journal.sqlite"
    ids = a_journal(path, runs=2)
    backups = sorted((home / "backups").glob("journal-*.sqlite"))
    assert len(backups) == 1  # the first run had nothing to back up; the second copied the first
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "backups").stat().st_mode) == 0o700
    damage(path, "random bytes")
    with pytest.raises(JournalError, match=str(backups[0])):
        Journal(path)
    shutil.copyfile(backups[0], path)
    restored = Journal(path)
    assert restored.run(ids[0]).kind == "tune"
    assert restored.first_snapshot(ids[0]) == {"h01": {"nics": {"eth2": {"mtu": 1500}}}}


def test_only_the_last_backups_are_kept(home: Path) -> None:
    a_journal(home / "journal.sqlite", runs=BACKUPS_KEPT + 3)
    assert len(list((home / "backups").glob("journal-*.sqlite"))) == BACKUPS_KEPT
    assert not list((home / "backups").glob("*.partial"))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of its own (root writes through chmod; a mount is the honest read-only/full disk)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], timeout=30, check=True)


def remount_ro(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], timeout=30, check=True)


def test_a_read_only_journal_can_be_read_but_a_write_names_the_file(tmpfs: Path) -> None:
    path = tmpfs / "journal.sqlite"
    ids = a_journal(path, runs=1)
    remount_ro(tmpfs)
    journal = Journal(path)
    try:
        assert [r.id for r in journal.runs()] == ids
        with pytest.raises(JournalError, match="read-only") as err:
            journal.open_run("tune", "rack", "inv.yml", None)
        assert str(path) in str(err.value) and "writable" in str(err.value)
    finally:
        journal.close()


def test_a_journal_in_a_read_only_directory_names_the_file(tmpfs: Path) -> None:
    remount_ro(tmpfs)
    with pytest.raises(JournalError, match="read-only") as err:
        Journal(tmpfs / "home" / "journal.sqlite")
    assert str(tmpfs / "home" / "journal.sqlite") in str(err.value)


def test_a_full_disk_names_the_file_and_leaves_the_journal_intact(tmpfs: Path) -> None:
    path = tmpfs / "journal.sqlite"
    filler = tmpfs / "filler"
    filler.write_bytes(b"\0" * (128 << 10))  # freed later: the disk gets space back
    journal = Journal(path)
    run_id = journal.open_run("tune", "rack", "inv.yml", None)
    with pytest.raises(JournalError, match="disk is full") as err:
        for n in range(1000):
            journal.step(run_id, "move", f"move {n}", {"pad": os.urandom(4000).hex()})
    assert str(path) in str(err.value) and "free space" in str(err.value)
    journal.close()
    filler.unlink()
    again = Journal(path)  # integrity-checked on open: every committed step is there
    committed = len(again.steps(run_id))
    assert committed > 0
    again.step(run_id, "move", "after", {})
    assert len(again.steps(run_id)) == committed + 1
    again.close()


def test_a_run_whose_process_died_is_interrupted(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = "from fabtune.journal import Journal; print(Journal().open_run('drift', 'rack', 'inv.yml', None))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    dead = done.stdout.strip()
    journal = Journal()
    alive = journal.open_run("tune", "rack", "inv.yml", None)
    assert journal.run(dead).state == "interrupted" and journal.run(alive).state == "running"
    assert {r.id: r.state for r in journal.runs()} == {dead: "interrupted", alive: "running"}
    assert main(["show", dead]) == 0
    assert "interrupted" in capsys.readouterr().out


def test_an_older_journal_gains_the_owner_columns(home: Path) -> None:
    db = sqlite3.connect(home / "journal.sqlite")
    db.executescript(OLD_SCHEMA)
    db.close()
    journal = Journal()
    run = journal.run("20240101-000000-abcdef")
    assert run.state == "running" and run.pid is None  # owner unknown: shown as journaled
    fresh = journal.open_run("tune", "rack", "inv.yml", None)
    assert journal.run(fresh).pid == os.getpid()


@pytest.mark.parametrize(
    "run_id", ["20990101-000000-abcdef", "nope", "../../etc/passwd", "x'; DROP TABLE runs"]
)
@pytest.mark.parametrize("verb", ["show", "rollback", "resume"])
def test_an_unknown_run_id_is_bad_input(
    home: Path, capsys: pytest.CaptureFixture[str], verb: str, run_id: str
) -> None:
    a_journal(home / "journal.sqlite", runs=1)
    assert main([verb, run_id]) == ExitStatus.CONFIG
    err = " ".join(capsys.readouterr().err.split())
    assert f"no run {run_id!r}" in err and str(home / "journal.sqlite") in err


class Unreachable:
    """A backend whose hosts stop answering: every Ansible run fails on h02."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self.calls = 0

    def _dark(self) -> RunOutcome:
        self.calls += 1
        stats = {"failures": {}, "dark": {"h02": 1}, "changed": {}}
        lost = TaskResult("h02", "Gathering Facts", "gather_facts", "runner_on_unreachable", False,
                          {"msg": "Failed to connect to the host via ssh: Connection timed out"})
        return RunOutcome("failed", 4, stats, (lost,), Path("/nonexistent"))

    def confirm(self, run_id: str) -> RunOutcome:
        return self._dark()

    def extend(self, run_id: str) -> RunOutcome:
        return self._dark()

    def apply(self, *_: Any, **__: Any) -> RunOutcome:
        return self._dark()

    def facts(self, *, hosts: Sequence[str] | None = None, measure_after: int = 0,
              pairs_after: int = 0) -> dict[str, Any]:
        self._dark().raise_for_failure("reading facts")
        return {}


def test_a_failed_resume_is_journaled(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = textwrap.dedent("""
        from fabtune.journal import Journal
        j = Journal()
        run = j.open_run('tune', 'rack', 'inv.yml', None)
        seq = j.step(run, 'move', 'MTU 4200', {'knobs': ['mtu']})
        nic = {'nics': {'eth2': {'mtu': 1500}}}
        j.snapshot(run, seq, {'h01': nic, 'h02': nic})
        print(run)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    run_id = done.stdout.strip()
    info = InventoryInfo(home / "inv.yml", "rack", "roce", ("h01", "h02"), (), "mpirun", None)
    monkeypatch.setattr(tune_run, "read_inventory", lambda _path: info)
    monkeypatch.setattr(tune_run, "AnsibleBackend", Unreachable)
    assert Journal().run(run_id).state == "interrupted"
    assert main(["resume", run_id]) == ExitStatus.PLAYBOOK
    run = Journal().run(run_id)
    assert run.state == "failed" and "h02" in run.summary["error"]


def test_sigterm_mid_drift_is_journaled(home: Path) -> None:
    """A drift run stopped by SIGTERM (a timeout) closes its run as interrupted, not running forever."""
    inventory = home / "inv.yml"
    inventory.write_text("all: {}\n")
    code = textwrap.dedent(f"""
        import importlib, sys, time
        from pathlib import Path
        from fabtune import drift
        from fabtune.inventory import InventoryInfo
        from fabtune.cli import main
        from fabtune.state import HostState
        verb = importlib.import_module('fabtune.commands.drift')  # the module, not the click command
        info = InventoryInfo(Path({str(inventory)!r}), 'rack', 'roce', ('h01',), (), 'mpirun', None)
        verb.read_inventory = lambda _path: info
        drift.desired_for = lambda _info, _profile: drift.DesiredSource(HostState(), 'test')
        def hang(*_args):
            print('checking', flush=True)
            time.sleep(600)
        drift.detect = hang
        sys.exit(main(['drift', '-i', {str(inventory)!r}]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "FABTUNE_HOME": str(home)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "checking"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert "SIGTERM" in err and "Traceback" not in err
    (run,) = Journal().runs()
    assert run.kind == "drift" and run.state == "interrupted" and "SIGTERM" in run.summary["error"]


def test_from_hosts_needs_an_inventory(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollback", OLD_RUN, "--from-hosts"]) == ExitStatus.CONFIG
    assert "--from-hosts: needs -i INVENTORY" in capsys.readouterr().err


@pytest.mark.parametrize("journal", ["damaged", "without the run"])
def test_rollback_falls_back_to_the_hosts_records_when_given_an_inventory(
    home: Path, monkeypatch: pytest.MonkeyPatch, journal: str
) -> None:
    path = home / "journal.sqlite"
    a_journal(path, runs=1)
    if journal == "damaged":
        damage(path, "random bytes")
    inventory = home / "inv.yml"
    inventory.write_text("all: {}\n")
    calls: list[tuple[str, Path]] = []

    def from_hosts(run_id: str, inv: Path, _on_event: Any = None) -> list[str]:
        calls.append((run_id, inv))
        return ["h01"]

    monkeypatch.setattr(rollbacks, "rollback_from_hosts", from_hosts)
    assert main(["rollback", OLD_RUN]) in (ExitStatus.ERROR, ExitStatus.CONFIG)  # no -i: the journal's error
    assert calls == []
    assert main(["rollback", OLD_RUN, "-i", str(inventory)]) == ExitStatus.OK
    assert calls == [(OLD_RUN, inventory)]
