"""A whole tuning run (tune, resume): validate, then in one journaled run (fabtune.lifecycle: lock,
journal, close, report) tune and write the tuned desired state."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabtune.advise.gate import Goal, at_phase
from fabtune.desired import TunedState, save_tuned, split_by_host
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal, Step
from fabtune.knobs import ROLES, roles_of
from fabtune.lifecycle import RunContext, journaled_run
from fabtune.paths import check_name, under_home
from fabtune.profile import Profile, check_against_rack, tune_options
from fabtune.state import HostState, states_of
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.loop import Event, RevertFired, TuneOptions, Tuner, TuneResult, restore_and_verify
from fabtune.tune.payloads import ResultPayload, undone_on_resume


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


def profile_state(desired: HostState) -> HostState:
    """One host's tuned state as a profile's: its first port's NIC knobs for every port (``all``),
    NCCL and SM where they are set."""
    nics = desired.nics or {}
    return HostState(nics={"all": nics[sorted(nics)[0]]} if nics else None, nccl=desired.nccl, sm=desired.sm)


def tuned_state(result: TuneResult) -> TunedState:
    """The tuned desired state: the tree most hosts share, and each other host's own (a repaired
    GID index, a per-host GDR level), so that drift does not undo a per-host move; and per host the
    roles whose knobs the run's kept moves set there (:func:`kept_roles`)."""
    split = split_by_host({host: profile_state(state) for host, state in result.desired.items()})
    return dataclasses.replace(split, persist_roles=kept_roles(result))


def kept_roles(result: TuneResult) -> dict[str, tuple[str, ...]]:
    """Per host, the roles a kept move ran there (every role where a move's knob has none).

    Those roles recorded their knobs for ``fabtune-boot`` when the move was applied; a host's other
    knobs are as the run found them, kept by the host itself: drift checks their values, not their
    persistence (a tune that keeps nothing leaves nothing of fabtune's to persist)."""
    found: dict[str, set[str]] = {host: set() for host in result.desired}
    for move in result.moves:
        if move.outcome == "kept":
            for host in move.hosts:
                found.setdefault(host, set()).update(roles_of(move.knobs) or ROLES)
    return {host: tuple(sorted(roles)) for host, roles in sorted(found.items())}


def finish(
    run: RunContext,
    result: TuneResult,
    tuned: Path,
    *,
    oracle: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> None:
    """Journal the outcome (tuned desired state, oracle) and what the run closes with (``done``)."""
    result_payload = ResultPayload(str(tuned), oracle)
    run.step("result", "tuned desired state", result_payload.to_json(), state="done")
    closing = {"baseline": result.baseline, "final": result.final, "tuned_desired": str(tuned)}
    run.end("done", {**closing, **dict(summary or {})})


def tune(
    inventory: Path,
    raw_options: Mapping[str, Any] | None = None,
    on_event: Event | None = None,
    oracle: Any = None,
    profile: Profile | None = None,
    *,
    goal: Goal | None = None,
) -> tuple[TuneResult, Path]:
    """Run ``fabtune tune`` on ``inventory``; returns the result and the report's path.

    ``profile``, the file the options came from, and ``goal``, the job (``--model``), are checked
    against the rack before anything runs; the job's prediction is journaled (:func:`predict_job`).
    """
    info = read_inventory(inventory)
    if profile is not None:
        check_against_rack(profile, info)
    if goal is not None:
        goal.check(len(info.hosts))
    options, deadline = options_from(raw_options, info)
    with journaled_run("tune", info.name, inventory) as run:
        run.step("options", "fabtune_tune", dict(raw_options or {}), state="done")
        if on_event is not None:
            note = f"; {run.stale_lock}" if run.stale_lock else ""
            message = f"run {run.run_id} on {info.name} ({len(info.hosts)} hosts){note}"
            on_event("run", message, {"stale_lock": run.stale_lock})
        backend = AnsibleBackend(info, deadline, views_with_facts=True)
        tuner = Tuner(backend, run.journal, run.run_id, info.fabric, options=options, on_event=on_event,
                      revert_deadline_s=deadline)
        result = _tuned(tuner)
        if goal is not None:
            predict_job(run, info, goal)
        tuned = save_tuned(info.name, tuned_state(result), run.run_id)
        finish(run, result, tuned, oracle=oracle(info) if oracle else None)
    return result, run.report_path


def predict_job(run: RunContext, info: InventoryInfo, goal: Goal) -> None:
    """The job's predicted MFU at the target size from the run's own busbw, for the baseline and for
    the final (kept) state, journaled as the step ``job prediction`` (a phase without a measurement
    is journaled as null; the run does not fail on the prediction)."""
    inputs = goal.inputs(len(info.hosts))
    steps = run.journal.steps(run.run_id)
    found = {p: at_phase(goal, inputs["nodes"], (run.run_id, "tune", info.fabric), steps, p)
             for p in ("baseline", "final")}
    predictions = {p: None if f is None else f.record() for p, f in found.items()}
    run.step("job", "job prediction", {**inputs, "predictions": predictions}, state="done")


def _tuned(tuner: Tuner, done: Sequence[str] = ()) -> TuneResult:
    """The tuning loop; after a failure mid-move the hosts are put back before the error goes on."""
    try:
        return tuner.run(done=done)
    except BaseException as err:
        _abort(tuner, err)
        raise


def _abort(tuner: Tuner, _err: BaseException) -> None:
    """After a failure mid-move, put the hosts back now (the armed host-side revert is the backstop)."""
    if not (tuner.reference or tuner.moving) or isinstance(_err, RevertFired):  # nothing held, or undone
        return
    try:
        restore_and_verify(tuner.backend, tuner.current)
        tuner.backend.confirm(tuner.run_id)
    except Exception:
        return


def resume(
    run_id: str,
    on_event: Event | None = None,
    raw_options: Mapping[str, Any] | None = None,
    profile: Profile | None = None,
    *,
    goal: Goal | None = None,
) -> tuple[TuneResult, Path]:
    """Continue an interrupted run: undo its unfinished move (verified), then try the moves not decided.

    The run keeps the options it started with (journaled first) unless ``raw_options`` is given;
    ``goal`` (``--model``) is checked against the rack first and its prediction journaled at the end.
    Whatever stops it (a host unreachable, an interrupt) is journaled: the run is closed ``failed``
    (``interrupted`` for Ctrl-C or SIGTERM).
    """
    journal = Journal()
    try:
        return _resume(journal, run_id, on_event, raw_options, profile, goal=goal)
    finally:
        journal.close()


def _resume(
    journal: Journal,
    run_id: str,
    on_event: Event | None,
    raw_options: Mapping[str, Any] | None,
    profile: Profile | None,
    *,
    goal: Goal | None = None,
) -> tuple[TuneResult, Path]:
    run = journal.run(run_id)
    if run.kind != "tune" or run.state not in ("running", "interrupted", "failed"):
        raise ConfigError(
            f"run {run_id}",
            [f"state: a {run.kind} run, {run.state}; only an interrupted or failed tune run can be resumed"],
        )
    info = read_inventory(Path(run.inventory))
    if profile is not None:
        check_against_rack(profile, info)
    if goal is not None:
        goal.check(len(info.hosts))
    steps = journal.steps(run_id)
    if raw_options is None:
        raw_options = next((s.payload for s in steps if s.kind == "options"), None)
    options, deadline = options_from(raw_options, info)
    decided = [s.name for s in steps if s.kind == "move" and s.state in ("kept", "rolled_back")]
    with journaled_run("tune", info.name, run.inventory, purpose=f"resume {run_id}", resume=run_id,
                       journal=journal) as ctx:
        backend = AnsibleBackend(info, deadline, views_with_facts=True)
        tuner = Tuner(backend, journal, run_id, info.fabric, options=options, on_event=on_event,
                      revert_deadline_s=deadline)
        _undo_open_moves(journal, run_id, backend, steps)
        result = _tuned(tuner, decided)
        if goal is not None:
            predict_job(ctx, info, goal)
        tuned = save_tuned(info.name, tuned_state(result), run_id)
        finish(ctx, result, tuned, summary={"resumed": True})
    return result, ctx.report_path


def _undo_open_moves(journal: Journal, run_id: str, backend: AnsibleBackend, steps: list[Step]) -> None:
    """Roll back (verified) each move the interrupted run left applied or half-applied."""
    for step in [s for s in steps if s.kind == "move" and s.state in ("intent", "applied")]:
        snap = journal.snapshot_at(run_id, step.seq)
        backend.confirm(run_id)
        restore_and_verify(backend, states_of(snap))
        journal.finish_step(
            run_id,
            step.seq,
            "rolled_back",
            undone_on_resume(step.payload),
        )

