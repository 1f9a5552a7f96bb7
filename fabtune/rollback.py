"""``fabtune rollback``: restore the hosts to their state before any journaled run that changed them
(tune, resume, apply, drift remediation), verified; or from the records the hosts keep themselves.

The fabric's lock is held throughout. The rollback is journaled in the run it undoes (a ``rollback``
step; the run is closed ``rolled_back``), not as a run of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal, JournalError, Run, UnknownRun, check_run_id, default_path
from fabtune.lifecycle import describe
from fabtune.lock import fabric_lock
from fabtune.state import states_of
from fabtune.tune.backend import AnsibleBackend, prerun_record_path
from fabtune.tune.loop import Event, restore_and_verify


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
    backend = backend_for(info, snapshot)
    with fabric_lock(info.name, f"rollback {run_id}"):
        return restore_journaled(journal, run, snapshot, backend, on_event)


def backend_for(info: InventoryInfo, snapshot: Mapping[str, Any]) -> AnsibleBackend:
    """The hosts of ``snapshot``: all of the inventory's, or only those a run changed (an apply
    with --limit; a rollback from the hosts where some keep no record)."""
    hosts = sorted(snapshot)
    return AnsibleBackend(info, hosts=None if set(hosts) >= set(info.hosts) else hosts)


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
        restore_and_verify(backend, states_of(snapshot))
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
    with fabric_lock(info.name, f"rollback {run_id} from the hosts"):
        snapshot = AnsibleBackend(info).prerun(run_id)
        if not snapshot:
            raise UnknownRun(
                f"no host of {inventory} keeps a pre-run record of run {run_id!r} "
                f"({prerun_record_path(run_id)}): the run changed nothing there, or its record was pruned"
            )
        if on_event is not None:
            missing = sorted(set(info.hosts) - set(snapshot))
            note = f" ({', '.join(missing)}: no record, not changed by the run)" if missing else ""
            on_event("rollback", f"restoring {len(snapshot)} hosts from their own records{note}", {})
        backend = backend_for(info, snapshot)
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


