"""Apply a profile's desired state to the hosts: one journaled run under the fabric's lock.

The run (kind ``apply``) journals, before anything changes, the managed state of every host the
apply targets (the pre-apply snapshot that ``fabtune rollback RUN`` restores), then the apply
(``playbooks/apply.yml``) and its outcome: per host, each knob changed (before -> after). A check
(``check=True``, ``fabtune apply --check``) runs ``playbooks/drift.yml`` in check mode and changes
nothing: it is journaled as a run in state ``checked`` with what would change, and no snapshot
(there is nothing to roll back).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from fabtune import ansible
from fabtune.changes import KnobChange, knob_changes
from fabtune.desired import TunedState
from fabtune.errors import ConfigError
from fabtune.inventory import read_inventory
from fabtune.lifecycle import RunContext, journaled_run
from fabtune.profile import Profile, check_against_rack
from fabtune.state import HostState, trees_of
from fabtune.tune.state import snapshot_of

VALIDATE_MODULE = "fabric_validate"
FACTS_MODULE = "fabric_facts"
CHECKED = "checked"


@dataclass(frozen=True)
class ApplyResult:
    """One apply (or check) run: its journal run, the Ansible outcome and each knob changed per host."""

    run_id: str
    check: bool
    outcome: ansible.RunOutcome
    changes: dict[str, list[KnobChange]]

    @property
    def hosts(self) -> list[str]:
        """Every host the run reached or changed."""
        return sorted(set(self.outcome.stats.get("ok", {})) | set(self.changes))


def host_problems(outcome: ansible.RunOutcome) -> list[str]:
    """The validation failures of a run, per host (the desired state did not fit a host)."""
    problems = []
    for task in outcome.failures():
        if task.module == VALIDATE_MODULE:
            for problem in task.result.get("problems") or [task.result.get("msg", "invalid")]:
                problems.append(f"{task.host}: {problem}")
    return problems


def read_state(inventory: Path, limit: str | None) -> dict[str, HostState]:
    """The managed state (NICs, NCCL, SM) of each host ``limit`` selects (all without one).

    Raises:
        PlaybookFailed: a host could not be read (nothing is applied then).
    """
    outcome = ansible.run_playbook("facts.yml", inventory, limit=limit)
    outcome.raise_for_failure("reading the hosts' state before the apply")
    return {
        host: snapshot_of((res.get("ansible_facts") or {}).get("fabric_facts") or {})
        for host, res in outcome.module_results(FACTS_MODULE).items()
    }


def apply(inventory: Path, profile: Profile, *, check: bool = False, limit: str | None = None) -> ApplyResult:
    """Apply ``profile``'s ``fabric_desired`` to the hosts of ``inventory`` (``limit``: a host pattern).

    The profile is checked against the rack before the lock is taken or the journal opened. The
    run is closed ``done`` (``checked`` for a check), or ``failed`` when a host failed; the caller
    raises that failure (``result.outcome.raise_for_failure``) after showing what changed.

    Raises:
        ConfigError: the profile does not fit the rack, or a host (nothing changed anywhere).
        LockedError: another run holds the fabric's lock.
        PlaybookFailed: the pre-apply state could not be read (nothing changed).
    """
    info = read_inventory(inventory)
    check_against_rack(profile, info)
    purpose = "apply (check)" if check else "apply"
    with journaled_run("apply", info.name, inventory, profile=str(profile.path), purpose=purpose) as run:
        targets: list[str] | None = None
        if not check:
            seq = run.step("snapshot", "pre-apply state", {"limit": limit})
            states = read_state(inventory, limit)
            run.snapshot(seq, trees_of(states))
            run.finish_step(seq, "done", {"limit": limit, "hosts": sorted(states)})
            targets = sorted(states)
        if profile.hosts and targets is None:
            targets = sorted(read_state(inventory, limit))
        return _apply(run, inventory, profile, check=check, limit=limit, targets=targets)


def _groups(
    profile: Profile, limit: str | None, targets: list[str] | None
) -> list[tuple[HostState, str | None]]:
    """Each desired state with the hosts it goes to: the whole ``limit`` when no host has a state
    of its own, else one run per state over the targeted hosts that take it."""
    if not profile.hosts or targets is None:
        return [(profile.desired, limit)]
    groups = TunedState(profile.desired, profile.hosts).groups(targets)
    return [(state, ",".join(hosts)) for state, hosts in groups]


def _apply(
    run: RunContext, inventory: Path, profile: Profile, *, check: bool, limit: str | None,
    targets: list[str] | None = None,
) -> ApplyResult:
    intent = {"profile": str(profile.path), "limit": limit, "check": check}
    seq = run.step("apply", "would change" if check else "apply the profile", intent)
    outcomes = [
        ansible.run_playbook(
            "drift.yml" if check else "apply.yml",
            inventory,
            extravars={**profile.playbook_vars(), "fabric_desired": state.tree()},
            check=check,
            diff=True,
            limit=hosts,
        )
        for state, hosts in _groups(profile, limit, targets)
    ]
    outcome = ansible.combine(outcomes)
    changes = knob_changes(outcome.tasks)
    done = {
        **intent,
        "changes": {h: [dataclasses.asdict(c) for c in items] for h, items in changes.items()},
        "failed_hosts": outcome.failed_hosts,
        "unreachable_hosts": outcome.unreachable_hosts,
        "artifacts": str(outcome.artifact_dir),
    }
    problems = host_problems(outcome)
    if problems:
        run.finish_step(seq, "failed", {**done, "problems": problems})
        raise ConfigError(f"profile {profile.path}", problems)
    run.finish_step(seq, "done" if outcome.ok else "failed", done)
    summary = {"hosts_changed": sorted(h for h, c in changes.items() if c),
               "knobs": sum(len(c) for c in changes.values()), "check": check}
    if outcome.ok:
        run.end(CHECKED if check else "done", summary)
    else:
        hosts = sorted({*outcome.failed_hosts, *outcome.unreachable_hosts})
        run.end("failed", {**summary, "error": f"the apply failed on {', '.join(hosts) or 'a host'}"})
    return ApplyResult(run.run_id, check, outcome, changes)
