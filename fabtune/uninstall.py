"""``fabtune uninstall``: remove everything fabtune put on the hosts, after restoring a run's pre-run state.

What fabtune installs is one list, the ``fabric_uninstall`` role's ``vars/main.yml``; this module
runs that role (``playbooks/uninstall.yml``) under the fabric lock, journaled as a run of kind
``uninstall``. First the role runs in check mode on every host: nothing changes anywhere when a
host cannot be reached or holds an armed commit-confirmed run (its revert would fire after
``fabtune-revert`` is gone). With ``restore``, that run's pre-run snapshot (the journal's, as
``fabtune rollback`` takes it) is put back and verified, then everything is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.errors import ConfigError, ExitStatus, FabtuneError
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal, Run
from fabtune.lifecycle import journaled_run
from fabtune.rollback import restore_journaled
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.loop import Event

PLAYBOOK = "uninstall.yml"
ARMED_TASK = "Find the commit-confirmed runs armed on this host"
# One fabric_remove call per host: its result lists the units stopped and the paths removed.
REMOVE_TASK = "Remove what fabtune installed"
# The pre-run, reverted and failed records beside the armed ones (fabric_apply.record_path).
NOT_ARMED = (".prerun.json", ".reverted.json", ".revert-failed.json")


class RunArmed(FabtuneError):
    """A commit-confirmed run is armed on a host: uninstalling now would break its revert."""

    code = ExitStatus.LOCKED


@dataclass
class UninstallResult:
    """What an uninstall did (or, checked, would do) per host."""

    run_id: str
    removed: dict[str, list[str]] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    restored_run: str | None = None
    check: bool = False


def armed_runs(outcome: ansible.RunOutcome) -> dict[str, list[str]]:
    """Per host, the runs armed there (``STATE_DIR/RUN.json``), from the role's first task."""
    found: dict[str, list[str]] = {}
    for host, result in outcome.results(ARMED_TASK).items():
        names = [str(f.get("path", "")).rsplit("/", 1)[-1] for f in result.get("files") or []]
        runs = sorted(n[: -len(".json")] for n in names if n.endswith(".json") and not n.endswith(NOT_ARMED))
        if runs:
            found[host] = runs
    return found


def removed_paths(outcome: ansible.RunOutcome) -> dict[str, list[str]]:
    """Per host, each unit stopped and path removed (or, in check mode, that would be), from the
    role's ``fabric_remove`` task; a host where it failed midway lists what went before."""
    out: dict[str, list[str]] = {}
    for task in outcome.tasks:
        if task.task != REMOVE_TASK or task.event not in ("runner_on_ok", "runner_on_failed"):
            continue
        gone = [str(x) for key in ("stopped", "removed") for x in task.result.get(key) or []]
        if gone:
            out[task.host] = gone
    return out


def _restore_source(journal: Journal, run_id: str, info: InventoryInfo) -> tuple[Run, dict[str, Any]]:
    """The run to restore and its pre-run snapshot, checked against the inventory.

    Raises:
        UnknownRun: not a run id, or not in the journal (exit 3).
        ConfigError: a run of another fabric, one without a snapshot, or hosts the inventory lacks.
    """
    run = journal.run(run_id)
    problems = []
    where = f"--restore: run {run_id}"
    if run.fabric != info.name:
        problems.append(f"{where} ran on fabric {run.fabric!r}, the inventory is {info.name!r}")
    if run.state == "running":
        problems.append(f"{where} is still running (pid {run.pid} on {run.host}): stop it first")
    snapshot = journal.first_snapshot(run_id)
    if not snapshot:
        problems.append(f"{where} recorded no pre-run state; nothing to restore")
    missing = sorted(set(snapshot) - set(info.hosts))
    if missing:
        problems.append(f"{where} changed {', '.join(missing)}, which the inventory does not list")
    if problems:
        raise ConfigError(f"run {run_id}", problems)
    return run, snapshot


def _refuse_armed(armed: Mapping[str, list[str]], restore: str | None) -> None:
    blocking = {h: [r for r in runs if r != restore] for h, runs in armed.items()}
    lines = [f"{h}: {', '.join(r)}" for h, r in sorted(blocking.items()) if r]
    if lines:
        raise RunArmed(
            f"commit-confirmed runs are armed and not confirmed ({'; '.join(lines)}): their revert "
            "fires at the deadline and needs what uninstall removes. Let the run finish, roll it back "
            "(fabtune rollback RUN) or uninstall with --restore RUN; nothing was changed"
        )


def uninstall(
    inventory: Path, *, restore: str | None = None, check: bool = False, on_event: Event | None = None
) -> UninstallResult:
    """Remove what fabtune installed on every host of ``inventory``; with ``restore``, first put
    that run's pre-run state back (verified). ``check``: say what would be removed, change nothing.

    Raises:
        UnknownRun, ConfigError: a bad ``restore`` (before anything runs).
        RunArmed: a run other than ``restore`` is armed on a host (nothing changed).
        PlaybookFailed: a host unreachable or a task failed.
    """
    emit = on_event or (lambda kind, message, data: None)
    info = read_inventory(inventory)
    journal = Journal()
    try:
        source = _restore_source(journal, restore, info) if restore else None
        purpose = "uninstall" + (" (check)" if check else "")
        with journaled_run("uninstall", info.name, inventory, purpose=purpose, journal=journal) as run:
            run.end("checked" if check else "done", {"restore": restore})  # kept on a failure
            result = _run(journal, run.run_id, info, source, check=check, emit=emit)
            run.end(run.state, {"removed": result.removed, "restored": result.restored})
    finally:
        journal.close()
    return result


def _run(
    journal: Journal,
    run_id: str,
    info: InventoryInfo,
    source: tuple[Run, dict[str, Any]] | None,
    *,
    check: bool,
    emit: Event,
) -> UninstallResult:
    restore = source[0].id if source else None
    extravars = {"fabric_uninstall_restored_run": restore or ""}
    result = UninstallResult(run_id, restored_run=restore, check=check)
    seq = journal.step(run_id, "check", "what would be removed", {"restore": restore})
    preview = ansible.run_playbook(PLAYBOOK, info.path, extravars=extravars, check=True, diff=True)
    armed = armed_runs(preview)
    journal.finish_step(run_id, seq, "done", {"armed": armed, "would_remove": removed_paths(preview)})
    _refuse_armed(armed, restore)
    preview.raise_for_failure("uninstall (checking every host)")
    for host in sorted(h for h, runs in armed.items() if restore in runs):
        emit("uninstall", f"{host}: run {restore} is armed: the restore cancels its revert and puts "
             "its pre-run state back", {"host": host})
    if check:
        result.removed = removed_paths(preview)
        return result
    if source is not None:
        run, snapshot = source
        seq = journal.step(run_id, "restore", f"restore the state before {run.id}",
                           {"hosts": sorted(snapshot)})
        result.restored = restore_journaled(journal, run, snapshot, AnsibleBackend(info), emit)
        journal.finish_step(run_id, seq, "done", {"hosts": result.restored, "verified": True})
    seq = journal.step(run_id, "remove", "remove what fabtune installed", {"hosts": list(info.hosts)})
    outcome = ansible.run_playbook(PLAYBOOK, info.path, extravars=extravars, diff=True)
    result.removed = removed_paths(outcome)
    if not outcome.ok:
        journal.finish_step(run_id, seq, "failed", {"removed": result.removed})
        outcome.raise_for_failure("uninstall")
    journal.finish_step(run_id, seq, "done", {"removed": result.removed})
    return result
