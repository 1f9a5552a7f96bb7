"""One run lifecycle for every use case that works on a fabric's hosts.

``tune``, ``resume``, ``bootstrap``, ``drift`` and ``apply`` each run their work inside
:func:`journaled_run`, which:

1. takes the fabric's lock (:func:`fabtune.lock.fabric_lock`): a run refused by the lock leaves
   no run in the journal;
2. opens a journal run (or, for a resume, claims the interrupted one) and journals a stale lock it
   took over;
3. hands the use case a :class:`RunContext` that journals its steps and snapshots;
4. closes the run on every path: with the state the use case chose (:meth:`RunContext.end`,
   ``done`` unless it says otherwise) when it returns, ``failed`` on an exception,
   ``interrupted`` on Ctrl-C or SIGTERM (:class:`~fabtune.errors.Terminated` is a
   KeyboardInterrupt), the error named in the run's summary;
5. writes the run's report (JSON, HTML, Markdown) where its kind has one, releases the lock and
   closes the journal it opened.

The use cases raise; ``fabtune.cli.main`` alone turns their errors into exit codes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import report as reports
from fabtune.journal import Journal
from fabtune.lock import fabric_lock
from fabtune.report.build import BUILDERS

DONE, FAILED, INTERRUPTED = "done", "failed", "interrupted"


def describe(err: BaseException) -> str:
    """An error as one line for the journal."""
    return str(err) or type(err).__name__


def closing_state(err: BaseException) -> str:
    """The state a run stopped by ``err`` is closed with."""
    return INTERRUPTED if isinstance(err, KeyboardInterrupt) else FAILED


@dataclass
class RunContext:
    """One open journal run, under its fabric's lock: what a use case journals its work through."""

    journal: Journal
    run_id: str
    kind: str
    fabric: str
    stale_lock: str | None = None
    state: str = DONE
    summary: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, Path] | None = None

    @property
    def report_path(self) -> Path:
        """Where the run's ``report.json`` is written (``$FABTUNE_HOME/runs/<run>/``)."""
        return reports.report_dir(self.run_id) / "report.json"

    @property
    def has_report(self) -> bool:
        return self.kind in BUILDERS

    def step(self, kind: str, name: str, payload: Mapping[str, Any], state: str = "intent") -> int:
        """Journal a step (before doing it); returns its sequence number."""
        return self.journal.step(self.run_id, kind, name, payload, state=state)

    def finish_step(self, seq: int, state: str, payload: Mapping[str, Any] | None = None) -> None:
        """Journal a step's outcome."""
        self.journal.finish_step(self.run_id, seq, state, payload)

    def snapshot(self, seq: int, states: Mapping[str, Any]) -> None:
        """Journal each host's managed state as read before step ``seq`` changes it."""
        self.journal.snapshot(self.run_id, seq, states)

    def end(self, state: str, summary: Mapping[str, Any] | None = None) -> None:
        """The state the run closes with when the use case returns, and what its summary adds.

        The summary is kept on a failure too (with the error added), so set it as the work goes.
        """
        self.state = state
        self.summary.update(summary or {})

    def close(self, state: str, error: str | None = None) -> None:
        """Close the run in the journal and write its report (a report that fails is a warning)."""
        summary = dict(self.summary)
        if error is not None:
            summary.setdefault("error", error)
        if self.has_report:
            summary.setdefault("report", str(self.report_path))
        self.journal.close_run(self.run_id, state, summary)
        if self.has_report:
            self.reports = reports.write_quietly(self.journal, self.run_id)


@contextmanager
def journaled_run(
    kind: str,
    fabric: str,
    inventory: Path | str,
    *,
    profile: str | None = None,
    purpose: str | None = None,
    resume: str | None = None,
    journal: Journal | None = None,
) -> Iterator[RunContext]:
    """Run a use case under ``fabric``'s lock as one journal run, closed on every path.

    Args:
        kind: the run's kind (``tune``, ``bootstrap``, ``drift``, ``apply``).
        fabric: the fabric's name (names the lock).
        inventory: journaled with the run.
        profile: journaled with the run.
        purpose: what the lock file says holds it (default: ``kind``).
        resume: an existing run to claim instead of opening a new one.
        journal: the journal to use (left open); default: a new handle on $FABTUNE_HOME's, closed at the end.

    Raises:
        LockedError: another run holds the lock (no run is journaled).
        JournalError: the journal cannot be written.
    """
    handle = journal or Journal()
    try:
        with fabric_lock(fabric, purpose or kind) as stale:
            yield from _run(handle, kind=kind, fabric=fabric, inventory=inventory, profile=profile,
                            resume=resume, stale=stale)
    finally:
        if journal is None:
            handle.close()


def _run(
    journal: Journal,
    *,
    kind: str,
    fabric: str,
    inventory: Path | str,
    profile: str | None,
    resume: str | None,
    stale: str | None,
) -> Iterator[RunContext]:
    if resume is None:
        run_id = journal.open_run(kind, fabric, str(inventory), profile)
    else:
        journal.claim(resume)
        run_id = resume
    run = RunContext(journal, run_id, kind, fabric, stale)
    try:
        if stale:  # its holder died: say so, beside the run it may have left
            run.step("lock", "stale lock taken over", {"note": stale}, state="done")
        yield run
    except BaseException as err:
        run.close(closing_state(err), describe(err))
        raise
    run.close(run.state)
