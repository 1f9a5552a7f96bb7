"""A whole tuning run: validate, lock, journal, tune, write the tuned desired state and the report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune import report
from fabtune.desired import save_tuned
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal
from fabtune.lock import fabric_lock
from fabtune.paths import check_name, under_home
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.loop import Event, TuneOptions, Tuner, TuneResult, restore_and_verify
from fabtune.tune.stats import DecisionPolicy

POLICY_KEYS = ("alpha", "min_effect", "min_runs", "max_runs", "batch", "futility", "detect")
OPTION_KEYS = (*POLICY_KEYS, "baseline_runs", "pause_guard", "guard_loss", "skip_groups", "revert_deadline_s")
DEFAULTS = TuneOptions()


def options_from(raw: Mapping[str, Any] | None) -> tuple[TuneOptions, int]:
    """Tuning options from a profile's ``fabtune_tune`` section, every problem named.

    Raises:
        ConfigError: listing each unknown key and invalid value.
    """
    raw = dict(raw or {})
    problems = [
        f"fabtune_tune.{k}: {raw[k]!r} is not a known option (known: {', '.join(OPTION_KEYS)})"
        for k in raw
        if k not in OPTION_KEYS
    ]
    policy_keys = {k: raw[k] for k in POLICY_KEYS if k in raw}
    try:
        policy = DecisionPolicy(**policy_keys)
        opts = TuneOptions(
            policy,
            int(raw.get("baseline_runs", DEFAULTS.baseline_runs)),
            float(raw.get("pause_guard", DEFAULTS.pause_guard)),
            float(raw.get("guard_loss", DEFAULTS.guard_loss)),
            tuple(raw.get("skip_groups", ())),
        )
        deadline = int(raw.get("revert_deadline_s", 300))
    except (TypeError, ValueError) as err:
        raise ConfigError("fabtune_tune", [f"{err}"]) from err
    problems += [f"fabtune_tune.{p}" for p in policy.problems()]
    if opts.baseline_runs < policy.min_runs:
        problems.append(
            f"fabtune_tune.baseline_runs: {opts.baseline_runs} must be at least min_runs ({policy.min_runs})"
        )
    if not 0 < opts.guard_loss < 1:
        problems.append(f"fabtune_tune.guard_loss: {opts.guard_loss} must be between 0 and 1 (a fraction)")
    if deadline < 30:
        problems.append(f"fabtune_tune.revert_deadline_s: {deadline} must be at least 30 seconds")
    if problems:
        raise ConfigError("tuning options", problems)
    return opts, deadline


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
    journal.close_run(run_id, "failed", {"error": str(err), "report": str(runs_dir(run_id) / "report.json")})
    report.write_quietly(journal, run_id, runs_dir(run_id))


def tune(
    inventory: Path,
    raw_options: Mapping[str, Any] | None = None,
    on_event: Event | None = None,
    oracle: Any = None,
) -> tuple[TuneResult, Path]:
    """Run ``fabtune tune`` on ``inventory``; returns the result and the report's path."""
    info = read_inventory(inventory)
    options, deadline = options_from(raw_options)
    journal = Journal()
    with fabric_lock(info.name, "tune") as stale:
        run_id = journal.open_run("tune", info.name, str(inventory), None)
        journal.step(run_id, "options", "fabtune_tune", dict(raw_options or {}), state="done")
        if on_event is not None:
            on_event("run", f"run {run_id} on {info.name} ({len(info.hosts)} hosts)", {"stale_lock": stale})
        tuner = Tuner(
            AnsibleBackend(info, deadline), journal, run_id, info.fabric, options=options, on_event=on_event
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
    if not tuner.reference:  # failed before any move: nothing was changed
        return
    try:
        restore_and_verify(tuner.backend, tuner.current)
        tuner.backend.confirm(tuner.run_id)
    except Exception:
        return


def rollback(run_id: str, on_event: Event | None = None) -> list[str]:
    """Restore every managed knob on every host to its value before run ``run_id``, and verify.

    Works after the controller was killed mid-move: the pre-run snapshot was journaled first.
    Armed host-side reverts of the run are cancelled first so they cannot fire afterwards.

    Returns:
        The hosts restored.
    """
    journal = Journal()
    run = journal.run(run_id)
    snapshot = journal.first_snapshot(run_id)
    if not snapshot:
        raise ConfigError(
            f"run {run_id}", ["snapshots: the run recorded no pre-run state; nothing to restore"]
        )
    info = read_inventory(Path(run.inventory))
    backend = AnsibleBackend(info)
    with fabric_lock(info.name, f"rollback {run_id}"):
        seq = journal.step(run_id, "rollback", "restore pre-run state", {"hosts": sorted(snapshot)})
        if on_event is not None:
            on_event("rollback", f"restoring {len(snapshot)} hosts to their state before {run_id}", {})
        backend.confirm(run_id)
        restore_and_verify(backend, snapshot)
        journal.finish_step(run_id, seq, "done", {"verified": True})
        journal.close_run(run_id, "rolled_back", {**run.summary, "rolled_back": True})
    return sorted(snapshot)


def resume(
    run_id: str, on_event: Event | None = None, raw_options: Mapping[str, Any] | None = None
) -> tuple[TuneResult, Path]:
    """Continue an interrupted run: undo its unfinished move (verified), then try the moves not decided.

    The run keeps the options it started with (journaled first) unless ``raw_options`` is given.
    """
    journal = Journal()
    run = journal.run(run_id)
    if run.kind != "tune" or run.state not in ("running", "failed"):
        raise ConfigError(
            f"run {run_id}",
            [f"state: a {run.kind} run, {run.state}; only an interrupted or failed tune run can be resumed"],
        )
    info = read_inventory(Path(run.inventory))
    steps = journal.steps(run_id)
    if raw_options is None:
        raw_options = next((s.payload for s in steps if s.kind == "options"), None)
    options, deadline = options_from(raw_options)
    decided = [s.name for s in steps if s.kind == "move" and s.state in ("kept", "rolled_back")]
    with fabric_lock(info.name, f"resume {run_id}"):
        backend = AnsibleBackend(info, deadline)
        open_moves = [s for s in steps if s.kind == "move" and s.state in ("intent", "applied")]
        for step in open_moves:
            snap = journal.snapshot_at(run_id, step.seq)
            backend.confirm(run_id)
            restore_and_verify(backend, snap)
            journal.finish_step(
                run_id,
                step.seq,
                "rolled_back",
                {**step.payload, "verified": True, "reason": "interrupted; undone on resume"},
            )
        tuner = Tuner(backend, journal, run_id, info.fabric, options=options, on_event=on_event)
        result = tuner.run(done=decided)
        tuned = save_tuned(info.name, tuned_tree(result), run_id)
        path = finish(journal, run_id, result, tuned, summary={"resumed": True})
    return result, path


def testbed_oracle(info: InventoryInfo) -> dict[str, Any] | None:
    """On a testbed, the model's best reachable all_reduce busbw and the tuned rack's, noise-free."""
    from fabtune.sim.model import best_config, expected_busbw  # the model only matters on a testbed
    from fabtune.sim.observe import controller_fabric
    from fabtune.testbed.build import load_state
    from fabtune.testbed.spec import is_testbed_name

    if not is_testbed_name(info.name) or load_state(info.name) is None:
        return None
    fabric = controller_fabric(info.name)
    size = 8 << 30
    _, best = best_config(fabric, "all_reduce", size)
    now = expected_busbw(fabric, "all_reduce", size)
    return {
        "best_busbw": best,
        "tuned_busbw": now,
        "share_of_best": now / best if best else None,
        "size_bytes": size,
    }
