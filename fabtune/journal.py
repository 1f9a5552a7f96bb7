"""The run journal: SQLite in WAL mode, written before each step, enough to roll back exactly.

Tables: ``runs`` (one per tuning, bootstrap or drift run, with the process that owns it),
``steps`` (each phase and move with its state: intent first, outcome after), ``snapshots`` (per
move and host, the managed state read before anything changed), ``artifacts`` (each Ansible run
made while a run was open here: its playbook or module, status and artifact directory, announced
by the adapter's observers and written with the journal's next write). A crash between an intent
and its outcome leaves the intent on disk.

The journal defends itself: it is integrity-checked when opened (``PRAGMA quick_check``), every
SQLite failure (damaged file, read-only or full disk, lock held) becomes one :class:`JournalError`
naming the file and what to do, and each new run first copies the journal with SQLite's backup API
to ``$FABTUNE_HOME/backups/journal-<time>.sqlite`` (0600, the last :data:`BACKUPS_KEPT` kept).
A run whose owning process is gone while its state says ``running`` reads as ``interrupted``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.errors import ExitStatus, FabtuneError
from fabtune.paths import fabtune_home

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, fabric TEXT NOT NULL, inventory TEXT NOT NULL,
    profile TEXT, state TEXT NOT NULL, started REAL NOT NULL, ended REAL, summary TEXT,
    pid INTEGER, pid_start INTEGER, host TEXT
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL REFERENCES runs(id), seq INTEGER NOT NULL, kind TEXT NOT NULL,
    name TEXT NOT NULL, state TEXT NOT NULL, payload TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS snapshots (
    run_id TEXT NOT NULL REFERENCES runs(id), step INTEGER NOT NULL, host TEXT NOT NULL,
    state TEXT NOT NULL, PRIMARY KEY (run_id, step, host)
);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT NOT NULL REFERENCES runs(id), at REAL NOT NULL, kind TEXT NOT NULL,
    status TEXT NOT NULL, path TEXT NOT NULL
);
"""
# Columns added after the first release: (name, SQL type), added to older journals on open.
OWNER_COLUMNS = (("pid", "INTEGER"), ("pid_start", "INTEGER"), ("host", "TEXT"))
SELECT_RUNS = (
    "SELECT id, kind, fabric, inventory, profile, state, started, ended, summary, pid, pid_start, host "
    "FROM runs"
)
# The shape of a run id (open_run makes them): checked before any lookup.
RUN_ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
# The start of a run id (what an operator types from `fabtune runs`): date, then time, then suffix.
RUN_PREFIX_RE = re.compile(r"^\d{1,8}(?:-\d{0,6}(?:-[0-9a-f]{0,6})?)?$")
RUN_ID_EXAMPLE = "20261201-140000-a1b2c3"
BACKUPS_KEPT = 10


class JournalError(FabtuneError):
    """The journal cannot be opened, read or written (damaged, read-only or full disk, locked)."""


class UnknownRun(JournalError):
    """A run id that is not in the journal (or cannot be one): bad input."""

    code = ExitStatus.CONFIG


@dataclass(frozen=True)
class Step:
    """One journaled step."""

    seq: int
    kind: str
    name: str
    state: str
    payload: Mapping[str, Any]
    at: float


@dataclass(frozen=True)
class Artifact:
    """One Ansible run made during a fabtune run: what ran, how it ended, where its artifacts are."""

    kind: str
    status: str
    path: str
    at: float


class _ArtifactLinker:
    """An observer of the Ansible adapter: collects the artifact directories of the runs made while
    a journal run is open, for the journal to write in its own thread (the adapter may run Ansible
    from others)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._pending: list[tuple[str, float, str, str, str]] = []
        self._lock = threading.Lock()

    def task(self, kind: str, result: ansible.TaskResult) -> None:
        """Task results are not journaled here (the artifacts hold them)."""

    def finished(self, kind: str, outcome: ansible.RunOutcome) -> None:
        with self._lock:
            self._pending.append((self.run_id, time.time(), kind, outcome.status, str(outcome.artifact_dir)))

    def take(self) -> list[tuple[str, float, str, str, str]]:
        with self._lock:
            taken, self._pending = self._pending, []
        return taken


@dataclass(frozen=True)
class Run:
    """One journaled run; ``state`` is the effective state (``interrupted`` for a dead owner)."""

    id: str
    kind: str
    fabric: str
    inventory: str
    profile: str | None
    state: str
    started: float
    ended: float | None
    summary: Mapping[str, Any]
    pid: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class Owner:
    """The process that owns a run: pid, its start time (clock ticks since boot) and host name."""

    pid: int
    start: int | None
    host: str

    @classmethod
    def me(cls) -> Owner:
        return cls(os.getpid(), process_start(os.getpid()), socket.gethostname())

    def alive(self) -> bool | None:
        """Whether the process still runs; None when it cannot be told (another host)."""
        if self.host != socket.gethostname():
            return None
        start = process_start(self.pid)
        return start is not None and (self.start is None or start == self.start)


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` (field 22 of ``/proc/PID/stat``); None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _run_of(row: tuple[Any, ...]) -> Run:
    run_id, kind, fabric, inventory, profile, state, started, ended, summary, pid, pid_start, host = row
    if state == "running" and pid is not None and host and Owner(pid, pid_start, host).alive() is False:
        state = "interrupted"
    info = json.loads(summary or "{}")
    return Run(run_id, kind, fabric, inventory, profile, state, started, ended, info, pid, host)


def default_path() -> Path:
    """``$FABTUNE_HOME/journal.sqlite``."""
    return fabtune_home() / "journal.sqlite"


def check_run_id(run_id: str, journal: Path) -> str:
    """Refuse a string that cannot be a run id (before it reaches a query or a host's path)."""
    if not RUN_ID_RE.match(run_id):
        raise UnknownRun(
            f"no run {run_id!r} in {journal}: a run id looks like {RUN_ID_EXAMPLE} "
            "(`fabtune runs` lists them)"
        )
    return run_id


def _cause(err: BaseException) -> str:
    text = str(err).lower()
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "disk is full" in text:
        return "full"
    if (isinstance(err, OSError) and err.errno == errno.EROFS) or "readonly" in text or "read-only" in text:
        return "readonly"
    if "locked" in text or "busy" in text:
        return "locked"
    if "not a database" in text or "malformed" in text or "corrupt" in text or "integrity" in text:
        return "damaged"
    return "other"


class Journal:
    """A handle on the journal database."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.backups = self.path.parent / "backups"
        self._linker: _ArtifactLinker | None = None
        with self._guard("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # On read-only media (no -shm/-wal can be made) the journal is still readable, read-only.
            self.read_only = self.path.exists() and not os.access(self.path.parent, os.W_OK)
            if self.read_only:
                uri = f"{self.path.resolve().as_uri()}?mode=ro&immutable=1"
                self._db = sqlite3.connect(uri, uri=True, isolation_level=None)
            else:
                self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            try:
                self._open()
            except BaseException:
                self._db.close()
                raise

    def _open(self) -> None:
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"integrity check failed: {'; '.join(problems[:3])}")
        if self.read_only:
            return
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        for name, kind in OWNER_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")

    def close(self) -> None:
        self._unlink_artifacts()
        self._db.close()

    def _link_artifacts(self, run_id: str) -> None:
        """From now on, link the artifact directory of every Ansible run to ``run_id``."""
        self._unlink_artifacts()
        self._linker = _ArtifactLinker(run_id)
        ansible.add_observer(self._linker)

    def _unlink_artifacts(self) -> None:
        if self._linker is None:
            return
        ansible.remove_observer(self._linker)
        pending = self._linker.take()
        self._linker = None
        if pending and not self.read_only:
            with suppress(sqlite3.Error):  # a journal that cannot be written said so at its last write
                self._db.executemany("INSERT INTO artifacts VALUES (?,?,?,?,?)", pending)

    def newest_backup(self) -> Path | None:
        found = sorted(self.backups.glob("journal-*.sqlite")) if self.backups.is_dir() else []
        return found[-1] if found else None

    def advice(self, cause: str) -> str:
        """What to do about a journal failure of ``cause``."""
        if cause == "full":
            return f"free space on the file system holding {self.path.parent}, then run the command again"
        if cause == "readonly":
            return f"make {self.path} and its directory writable (remount read-write), then run again"
        if cause == "locked":
            return "another fabtune process holds it: wait for it to finish, or find it (`fabtune runs`)"
        backup = self.newest_backup()
        where = f"restore it from {backup}" if backup else f"restore a backup (none in {self.backups})"
        return (
            f"{where} or move it aside (a new journal is started); the hosts keep their own revert "
            "records: fabtune rollback RUN -i INVENTORY --from-hosts"
        )

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn any SQLite or file-system failure into one JournalError naming the file."""
        try:
            yield
        except (sqlite3.Error, OSError) as err:
            cause = _cause(err)
            happened = {
                "full": "its disk is full",
                "readonly": "it is read-only",
                "locked": "it is locked",
                "damaged": "it is damaged",
            }.get(cause, "it cannot be used")
            raise JournalError(
                f"the journal {self.path} ({what}): {happened} ({err}); {self.advice(cause)}"
            ) from err

    @contextmanager
    def _tx(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._guard(what):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if self._linker is not None and (pending := self._linker.take()):
                    self._db.executemany("INSERT INTO artifacts VALUES (?,?,?,?,?)", pending)
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    def backup(self) -> Path | None:
        """Copy the journal (SQLite backup API) to ``backups/journal-<time>.sqlite``, 0600; keep the last 10.

        Nothing is copied while the journal holds no run. Returns the copy's path.
        """
        with self._guard("backup"):
            if self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0:
                return None
            self.backups.mkdir(mode=0o700, parents=True, exist_ok=True)
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
            target = self.backups / f"journal-{stamp}.sqlite"
            partial = target.with_suffix(".partial")
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            try:
                copy = sqlite3.connect(partial)
                try:
                    self._db.backup(copy)
                finally:
                    copy.close()
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
            for old in sorted(self.backups.glob("journal-*.sqlite"))[:-BACKUPS_KEPT]:
                old.unlink(missing_ok=True)
        return target

    def open_run(self, kind: str, fabric: str, inventory: str, profile: str | None) -> str:
        """Back the journal up, create a run in state ``running`` owned by this process, return its id."""
        self.backup()
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        owner = Owner.me()
        with self._tx("opening a run") as db:
            db.execute(
                "INSERT INTO runs (id, kind, fabric, inventory, profile, state, started, ended, summary, "
                "pid, pid_start, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, kind, fabric, inventory, profile, "running", time.time(), None, "{}",
                 owner.pid, owner.start, owner.host),
            )
        self._link_artifacts(run_id)
        return run_id

    def claim(self, run_id: str) -> None:
        """Make this process the owner of ``run_id`` again, state ``running`` (a resume)."""
        owner = Owner.me()
        with self._tx("claiming a run") as db:
            db.execute(
                "UPDATE runs SET state='running', ended=NULL, pid=?, pid_start=?, host=? WHERE id=?",
                (owner.pid, owner.start, owner.host, run_id),
            )
        self._link_artifacts(run_id)

    def step(
        self, run_id: str, kind: str, name: str, payload: Mapping[str, Any], state: str = "intent"
    ) -> int:
        """Journal a step (before doing it) and return its sequence number."""
        with self._tx("journaling a step") as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM steps WHERE run_id=?", (run_id,)
            ).fetchone()
            seq = int(row[0])
            db.execute(
                "INSERT INTO steps VALUES (?,?,?,?,?,?,?)",
                (run_id, seq, kind, name, state, json.dumps(payload, sort_keys=True), time.time()),
            )
        return seq

    def finish_step(
        self, run_id: str, seq: int, state: str, payload: Mapping[str, Any] | None = None
    ) -> None:
        """Record a step's outcome (``done``, ``kept``, ``rolled_back``, ``failed``...)."""
        with self._tx("journaling a step's outcome") as db:
            if payload is None:
                db.execute("UPDATE steps SET state=? WHERE run_id=? AND seq=?", (state, run_id, seq))
            else:
                db.execute(
                    "UPDATE steps SET state=?, payload=? WHERE run_id=? AND seq=?",
                    (state, json.dumps(payload, sort_keys=True), run_id, seq),
                )

    def snapshot(self, run_id: str, step: int, states: Mapping[str, Any]) -> None:
        """Store each host's managed state as read before a move changes it."""
        with self._tx("journaling a snapshot") as db:
            db.executemany(
                "INSERT OR REPLACE INTO snapshots VALUES (?,?,?,?)",
                [(run_id, step, h, json.dumps(s, sort_keys=True)) for h, s in states.items()],
            )

    def close_run(self, run_id: str, state: str, summary: Mapping[str, Any]) -> None:
        with self._tx("closing a run") as db:
            db.execute(
                "UPDATE runs SET state=?, ended=?, summary=? WHERE id=?",
                (state, time.time(), json.dumps(summary, sort_keys=True), run_id),
            )
        if self._linker is not None and self._linker.run_id == run_id:
            self._unlink_artifacts()

    def has_run(self, run_id: str) -> bool:
        """Whether ``run_id`` is a run id present in the journal."""
        if not RUN_ID_RE.match(run_id):
            return False
        with self._guard("reading a run"):
            return self._db.execute("SELECT 1 FROM runs WHERE id=?", (run_id,)).fetchone() is not None

    def resolve(self, text: str) -> str:
        """The run id that ``text`` (a whole id or any unique start of one) names.

        Raises:
            UnknownRun: no run, or several, start with ``text`` (they are named).
        """
        if RUN_ID_RE.match(text):
            return text
        if not RUN_PREFIX_RE.match(text):
            check_run_id(text, self.path)
        with self._guard("finding a run"):
            rows = self._db.execute(
                "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 6", (len(text), text)
            ).fetchall()
        ids = [str(r[0]) for r in rows]
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise UnknownRun(f"no run starting with {text!r} in {self.path} (`fabtune runs` lists the runs)")
        listed = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise UnknownRun(f"run id {text!r} is ambiguous: it starts {listed}; give more of it")

    def run(self, run_id: str) -> Run:
        check_run_id(run_id, self.path)
        with self._guard("reading a run"):
            row = self._db.execute(SELECT_RUNS + " WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise UnknownRun(f"no run {run_id!r} in {self.path} (`fabtune runs` lists the runs)")
        return _run_of(row)

    def runs(self, limit: int = 50) -> list[Run]:
        with self._guard("listing runs"):
            rows = self._db.execute(
                SELECT_RUNS + " ORDER BY started DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_run_of(r) for r in rows]

    def steps(self, run_id: str) -> list[Step]:
        with self._guard("reading steps"):
            rows = self._db.execute(
                "SELECT seq, kind, name, state, payload, at FROM steps WHERE run_id=? ORDER BY seq", (run_id,)
            ).fetchall()
        return [Step(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def artifacts(self, run_id: str) -> list[Artifact]:
        """The Ansible runs of ``run_id`` with their artifact directories, oldest first."""
        if self._linker is not None and self._linker.run_id == run_id and not self.read_only:
            with self._tx("journaling artifacts"):
                pass  # writes what is pending
        with self._guard("reading artifacts"):
            if self._db.execute("SELECT 1 FROM sqlite_master WHERE name='artifacts'").fetchone() is None:
                return []  # a read-only journal from before artifacts were linked
            rows = self._db.execute(
                "SELECT kind, status, path, at FROM artifacts WHERE run_id=? ORDER BY at, rowid", (run_id,)
            ).fetchall()
        return [Artifact(r[0], r[1], r[2], r[3]) for r in rows]

    def snapshot_at(self, run_id: str, step: int) -> dict[str, Any]:
        """Per host, the snapshot journaled for ``step``."""
        with self._guard("reading a snapshot"):
            rows = self._db.execute(
                "SELECT host, state FROM snapshots WHERE run_id=? AND step=?", (run_id, step)
            ).fetchall()
        return {host: json.loads(state) for host, state in rows}

    def first_snapshot(self, run_id: str) -> dict[str, Any]:
        """Per host, the earliest snapshot of the run: the exact pre-run managed state."""
        with self._guard("reading a snapshot"):
            rows = self._db.execute(
                "SELECT host, state FROM snapshots WHERE run_id=? ORDER BY step DESC", (run_id,)
            ).fetchall()
        return {host: json.loads(state) for host, state in rows}
