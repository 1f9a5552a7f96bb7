"""A whole tuning run: validate, lock, journal, tune, write the tuned desired state and the report."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune import report
from fabtune.desired import save_tuned
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal, JournalError, Run, Step, UnknownRun, check_run_id, default_path
from fabtune.lock import fabric_lock
from fabtune.paths import check_name, under_home
from fabtune.profile import Profile, check_against_rack, tune_options
from fabtune.tune.backend import AnsibleBackend, prerun_record_path
from fabtune.tune.loop import Event, RevertFired, TuneOptions, Tuner, TuneResult, restore_and_verify


def options_from(raw: Mapping[str, Any] | None, info: InventoryInfo | None = None) -> tuple[TuneOptions, int]:
    """Tuning options from a profile's ``fabtune_tune`` section (or a run's journaled options), with
    what the inventory declares for the planner (``fabtune_lossless``, ``fabtune_sm_flavor``).

    Raises:
        ConfigError: listing each unknown key and invalid value (``fabtune.profile`` checks them).
    """
    options, deadline = tune_options(raw)
    if info is not None:
        options = dataclasses.replace(options, lossless=info.lossless, sm_flavor=info.sm_flavor)
    return options, deadline


def runs_dir(run_id: str) -> Path:
    """``$FABTUNE_HOME/runs/<run_id>/`` (the run id checked as a file name)."""
    return under_home("runs", check_name("run id", run_id))


def tuned_tree(result: TuneResult) -> dict[str, Any]:
    """The tuned desired state as one profile tree (NIC knobs for every port, NCCL, SM)."""
    first = result.desired[sorted(result.desired)[0]]
    nics = first.get("nics") or {}
    tree: dict[str, Any] = {"nics": {"all": nics[sorted(nics)[0]]}} if nics else {}
    for key in ("nccl", "sm"):
        if first.get(key) is not None:
            tree[key] = first[key]
    return tree


def write_report(journal: Journal, run_id: str) -> Path:
    """Write the run's report (JSON, HTML, Markdown) from the journal alone; returns report.json's path."""
    return report.write_all(journal, run_id, runs_dir(run_id))["json"]


def finish(
    journal: Journal,
    run_id: str,
    result: TuneResult,
    tuned: Path,
    *,
    oracle: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> Path:
    """Journal the outcome (tuned desired state, oracle), close the run, write its report from the journal."""
    journal.step(
        run_id, "result", "tuned desired state", {"tuned_desired": str(tuned), "oracle": oracle}, state="done"
    )
    path = runs_dir(run_id) / "report.json"
    closing = {
        "report": str(path),
        "baseline": result.baseline,
        "final": result.final,
        "tuned_desired": str(tuned),
    }
    journal.close_run(run_id, "done", {**closing, **dict(summary or {})})
    return write_report(journal, run_id)


def fail(journal: Journal, run_id: str, err: BaseException) -> None:
    """Close a failed run and write what its journal holds as a report (best effort)."""
    closing = {"error": describe(err), "report": str(runs_dir(run_id) / "report.json")}
    journal.close_run(run_id, "failed", closing)
    report.write_quietly(journal, run_id, runs_dir(run_id))


def tune(
    inventory: Path,
    raw_options: Mapping[str, Any] | None = None,
    on_event: Event | None = None,
    oracle: Any = None,
    profile: Profile | None = None,
) -> tuple[TuneResult, Path]:
    """Run ``fabtune tune`` on ``inventory``; returns the result and the report's path.

    ``profile``, the file the options came from, is checked against the rack before anything runs.
    """
    info = read_inventory(inventory)
    if profile is not None:
        check_against_rack(profile, info)
    options, deadline = options_from(raw_options, info)
    journal = Journal()
    with fabric_lock(info.name, "tune") as stale:
        run_id = journal.open_run("tune", info.name, str(inventory), None)
        journal.step(run_id, "options", "fabtune_tune", dict(raw_options or {}), state="done")
        if stale:  # its holder died: say so, and journal it beside the run it may have left
            journal.step(run_id, "lock", "stale lock taken over", {"note": stale}, state="done")
        if on_event is not None:
            note = f"; {stale}" if stale else ""
            message = f"run {run_id} on {info.name} ({len(info.hosts)} hosts){note}"
            on_event("run", message, {"stale_lock": stale})
        tuner = Tuner(
            AnsibleBackend(info, deadline), journal, run_id, info.fabric, options=options,
            on_event=on_event, revert_deadline_s=deadline,
        )
        try:
            result = tuner.run()
        except BaseException as err:
            _abort(tuner, err)
            fail(journal, run_id, err)
            raise
        tuned = save_tuned(info.name, tuned_tree(result), run_id)
        path = finish(journal, run_id, result, tuned, oracle=oracle(info) if oracle else None)
    return result, path


def _abort(tuner: Tuner, _err: BaseException) -> None:
    """After a failure mid-move, put the hosts back now (the armed host-side revert is the backstop)."""
    if not tuner.reference or isinstance(_err, RevertFired):  # nothing changed, or already undone
        return
    try:
        restore_and_verify(tuner.backend, tuner.current)
        tuner.backend.confirm(tuner.run_id)
    except Exception:
        return


def rollback(
    run_id: str,
    on_event: Event | None = None,
    *,
    inventory: Path | None = None,
    from_hosts: bool = False,
) -> list[str]:
    """Restore every managed knob on every host to its value before run ``run_id``, and verify.

    Works after the controller was killed mid-move: the pre-run snapshot was journaled first.
    Armed host-side reverts of the run are cancelled first so they cannot fire afterwards. With
    ``from_hosts``, or when the journal cannot be used or has no such run and ``inventory`` is
    given, the snapshot is the one each host kept itself (:func:`rollback_from_hosts`).

    Returns:
        The hosts restored.
    """
    if from_hosts:
        if inventory is None:
            raise ConfigError("rollback", ["--from-hosts: needs -i INVENTORY (the hosts to read)"])
        return rollback_from_hosts(run_id, inventory, on_event)
    try:
        journal = Journal()
        run = journal.run(run_id)
    except JournalError as err:
        if inventory is None:
            raise
        if on_event is not None:
            on_event("rollback", f"{err}; reading the hosts' own pre-run records instead", {})
        return rollback_from_hosts(run_id, inventory, on_event)
    snapshot = journal.first_snapshot(run_id)
    if not snapshot:
        raise ConfigError(
            f"run {run_id}", ["snapshots: the run recorded no pre-run state; nothing to restore"]
        )
    info = read_inventory(inventory or Path(run.inventory))
    backend = AnsibleBackend(info)
    with fabric_lock(info.name, f"rollback {run_id}"):
        return restore_journaled(journal, run, snapshot, backend, on_event)


def restore_journaled(
    journal: Journal,
    run: Run,
    snapshot: Mapping[str, Mapping[str, Any]],
    backend: AnsibleBackend,
    on_event: Event | None = None,
) -> list[str]:
    """Cancel ``run``'s armed reverts, restore its pre-run ``snapshot`` (verified) and journal it in the run.

    The body of :func:`rollback`, also run by ``fabtune uninstall --restore``: the caller holds the
    fabric lock.

    Returns:
        The hosts restored.
    """
    seq = journal.step(run.id, "rollback", "restore pre-run state", {"hosts": sorted(snapshot)})
    if on_event is not None:
        on_event("rollback", f"restoring {len(snapshot)} hosts to their state before {run.id}", {})
    try:
        backend.confirm(run.id)
        restore_and_verify(backend, snapshot)
    except BaseException as err:
        journal.finish_step(run.id, seq, "failed", {"hosts": sorted(snapshot), "error": describe(err)})
        raise
    journal.finish_step(run.id, seq, "done", {"verified": True})
    journal.close_run(run.id, "rolled_back", {**run.summary, "rolled_back": True})
    return sorted(snapshot)


def rollback_from_hosts(run_id: str, inventory: Path, on_event: Event | None = None) -> list[str]:
    """Restore run ``run_id``'s pre-run state from the records the hosts kept (no journal needed), verified.

    Each host keeps the snapshot of the run's first armed move (fabric_revert) until pruned; hosts
    without one were not changed by the run. The rollback is journaled when the journal is usable.

    Raises:
        UnknownRun: no host of the inventory keeps a pre-run record of the run.
    """
    check_run_id(run_id, default_path())
    info = read_inventory(inventory)
    backend = AnsibleBackend(info)
    with fabric_lock(info.name, f"rollback {run_id} from the hosts"):
        snapshot = backend.prerun(run_id)
        if not snapshot:
            raise UnknownRun(
                f"no host of {inventory} keeps a pre-run record of run {run_id!r} "
                f"({prerun_record_path(run_id)}): the run changed nothing there, or its record was pruned"
            )
        if on_event is not None:
            missing = sorted(set(info.hosts) - set(snapshot))
            note = f" ({', '.join(missing)}: no record, not changed by the run)" if missing else ""
            on_event("rollback", f"restoring {len(snapshot)} hosts from their own records{note}", {})
        backend.confirm(run_id)
        restore_and_verify(backend, snapshot)
    _journal_host_rollback(run_id, sorted(snapshot))
    return sorted(snapshot)


def _journal_host_rollback(run_id: str, hosts: list[str]) -> None:
    """Record a rollback from the hosts in the journal when it is usable and knows the run."""
    try:
        journal = Journal()
        if journal.has_run(run_id):
            run = journal.run(run_id)
            journal.step(run_id, "rollback", "restore pre-run state from the hosts' records",
                         {"hosts": hosts, "verified": True}, state="done")
            journal.close_run(run_id, "rolled_back", {**run.summary, "rolled_back": True, "from_hosts": True})
    except JournalError:
        return


def describe(err: BaseException) -> str:
    """An error as one line for the journal."""
    return str(err) or type(err).__name__


def resume(
    run_id: str,
    on_event: Event | None = None,
    raw_options: Mapping[str, Any] | None = None,
    profile: Profile | None = None,
) -> tuple[TuneResult, Path]:
    """Continue an interrupted run: undo its unfinished move (verified), then try the moves not decided.

    The run keeps the options it started with (journaled first) unless ``raw_options`` is given.
    Whatever stops it (a host unreachable, an interrupt) is journaled: the run is closed ``failed``.
    """
    journal = Journal()
    run = journal.run(run_id)
    if run.kind != "tune" or run.state not in ("running", "interrupted", "failed"):
        raise ConfigError(
            f"run {run_id}",
            [f"state: a {run.kind} run, {run.state}; only an interrupted or failed tune run can be resumed"],
        )
    info = read_inventory(Path(run.inventory))
    if profile is not None:
        check_against_rack(profile, info)
    steps = journal.steps(run_id)
    if raw_options is None:
        raw_options = next((s.payload for s in steps if s.kind == "options"), None)
    options, deadline = options_from(raw_options, info)
    decided = [s.name for s in steps if s.kind == "move" and s.state in ("kept", "rolled_back")]
    with fabric_lock(info.name, f"resume {run_id}"):
        journal.claim(run_id)
        backend = AnsibleBackend(info, deadline)
        tuner = Tuner(backend, journal, run_id, info.fabric, options=options, on_event=on_event,
                      revert_deadline_s=deadline)
        try:
            _undo_open_moves(journal, run_id, backend, steps)
            result = tuner.run(done=decided)
        except BaseException as err:
            _abort(tuner, err)
            fail(journal, run_id, err)
            raise
        tuned = save_tuned(info.name, tuned_tree(result), run_id)
        path = finish(journal, run_id, result, tuned, summary={"resumed": True})
    return result, path


def _undo_open_moves(journal: Journal, run_id: str, backend: AnsibleBackend, steps: list[Step]) -> None:
    """Roll back (verified) each move the interrupted run left applied or half-applied."""
    for step in [s for s in steps if s.kind == "move" and s.state in ("intent", "applied")]:
        snap = journal.snapshot_at(run_id, step.seq)
        backend.confirm(run_id)
        restore_and_verify(backend, snap)
        journal.finish_step(
            run_id,
            step.seq,
            "rolled_back",
            {**step.payload, "verified": True, "reason": "interrupted; undone on resume"},
        )

