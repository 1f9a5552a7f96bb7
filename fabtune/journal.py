"""The run journal: SQLite in WAL mode, written before each step, enough to roll back exactly.

Tables: ``runs`` (one per tuning, bootstrap or drift run), ``steps`` (each phase and move with
its state: intent first, outcome after), ``snapshots`` (per move and host, the managed state read
before anything changed). A crash between an intent and its outcome leaves the intent on disk.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.errors import FabtuneError
from fabtune.paths import fabtune_home

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, fabric TEXT NOT NULL, inventory TEXT NOT NULL,
    profile TEXT, state TEXT NOT NULL, started REAL NOT NULL, ended REAL, summary TEXT
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
"""


class JournalError(FabtuneError):
    """The journal cannot be read or has no such run."""


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
class Run:
    """One journaled run."""

    id: str
    kind: str
    fabric: str
    inventory: str
    profile: str | None
    state: str
    started: float
    ended: float | None
    summary: Mapping[str, Any]


def _run_of(row: tuple[Any, ...]) -> Run:
    run_id, kind, fabric, inventory, profile, state, started, ended, summary = row
    return Run(run_id, kind, fabric, inventory, profile, state, started, ended, json.loads(summary or "{}"))


def default_path() -> Path:
    """``$FABTUNE_HOME/journal.sqlite``."""
    return fabtune_home() / "journal.sqlite"


class Journal:
    """A handle on the journal database."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def open_run(self, kind: str, fabric: str, inventory: str, profile: str | None) -> str:
        """Create a run in state ``running`` and return its id."""
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                (run_id, kind, fabric, inventory, profile, "running", time.time(), None, "{}"),
            )
        return run_id

    def step(
        self, run_id: str, kind: str, name: str, payload: Mapping[str, Any], state: str = "intent"
    ) -> int:
        """Journal a step (before doing it) and return its sequence number."""
        with self._tx() as db:
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
        with self._tx() as db:
            if payload is None:
                db.execute("UPDATE steps SET state=? WHERE run_id=? AND seq=?", (state, run_id, seq))
            else:
                db.execute(
                    "UPDATE steps SET state=?, payload=? WHERE run_id=? AND seq=?",
                    (state, json.dumps(payload, sort_keys=True), run_id, seq),
                )

    def snapshot(self, run_id: str, step: int, states: Mapping[str, Any]) -> None:
        """Store each host's managed state as read before a move changes it."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO snapshots VALUES (?,?,?,?)",
                [(run_id, step, h, json.dumps(s, sort_keys=True)) for h, s in states.items()],
            )

    def close_run(self, run_id: str, state: str, summary: Mapping[str, Any]) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET state=?, ended=?, summary=? WHERE id=?",
                (state, time.time(), json.dumps(summary, sort_keys=True), run_id),
            )

    def run(self, run_id: str) -> Run:
        row = self._db.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise JournalError(f"no run {run_id!r} in {self.path}")
        return _run_of(row)

    def runs(self, limit: int = 50) -> list[Run]:
        rows = self._db.execute("SELECT * FROM runs ORDER BY started DESC LIMIT ?", (limit,)).fetchall()
        return [_run_of(r) for r in rows]

    def steps(self, run_id: str) -> list[Step]:
        rows = self._db.execute(
            "SELECT seq, kind, name, state, payload, at FROM steps WHERE run_id=? ORDER BY seq", (run_id,)
        ).fetchall()
        return [Step(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def snapshot_at(self, run_id: str, step: int) -> dict[str, Any]:
        """Per host, the snapshot journaled for ``step``."""
        rows = self._db.execute("SELECT host, state FROM snapshots WHERE run_id=? AND step=?",
                                (run_id, step)).fetchall()
        return {host: json.loads(state) for host, state in rows}

    def first_snapshot(self, run_id: str) -> dict[str, Any]:
        """Per host, the earliest snapshot of the run: the exact pre-run managed state."""
        rows = self._db.execute(
            "SELECT host, state FROM snapshots WHERE run_id=? ORDER BY step DESC", (run_id,)
        ).fetchall()
        return {host: json.loads(state) for host, state in rows}
