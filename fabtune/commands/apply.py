"""``fabtune apply``: validate a profile, apply it with the apply playbook, show each knob changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fabtune.ansible import RunOutcome, run_playbook
from fabtune.changes import knob_changes
from fabtune.commands._common import ResultOutput, absolute_path, result_output
from fabtune.errors import ConfigError
from fabtune.inventory import read_inventory
from fabtune.profile import check_against_rack, load_profile

VALIDATE_TASK = "Validate the desired fabric state"


def _host_problems(outcome: RunOutcome) -> list[str]:
    """The validation failures of a run, per host (the desired state did not fit a host)."""
    problems = []
    for task in outcome.failures():
        if task.task == VALIDATE_TASK:
            for problem in task.result.get("problems") or [task.result.get("msg", "invalid")]:
                problems.append(f"{task.host}: {problem}")
    return problems


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return "-" if value is None else str(value)


@click.command("apply")
@click.option("-i", "--inventory", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=absolute_path,
              help="Ansible inventory of the hosts.")
@click.option("--profile", "profile_path", required=True, type=click.Path(path_type=Path),
              help="Profile (YAML with fabric_desired), or a shipped one by name: roce, ib.")
@click.option("--check", is_flag=True, help="Change nothing: show what would change (drift).")
@click.option("--limit", default=None, help="Only these hosts (an Ansible host pattern).")
@result_output()
def apply(inventory: Path, profile_path: Path, check: bool, limit: str | None, output: ResultOutput) -> None:
    """Apply a fabric profile to every host and show, per host, each knob changed (before -> after).

    Nothing changes on any host unless the profile validates, first here (schema, couplings, and
    against the inventory: fabric type, subnet-manager hosts), then on every host (interfaces present).
    """
    profile = load_profile(profile_path, need="fabric_desired")
    check_against_rack(profile, read_inventory(inventory))
    outcome = run_playbook("drift.yml" if check else "apply.yml", inventory,
                           extravars={"fabric_desired": profile.desired}, check=check, diff=True, limit=limit)
    problems = _host_problems(outcome)
    if problems:
        raise ConfigError(f"profile {profile_path}", problems)
    changes = knob_changes(outcome.tasks)
    verb = "would change" if check else "changed"
    hosts = sorted(set(outcome.stats.get("ok", {})) | set(changes))
    for host in hosts:
        items = changes.get(host, [])
        output.echo(f"{host}: {len(items)} knob(s) {verb}" if items else f"{host}: unchanged")
        for item in items:
            output.echo(f"  {item.knob}: {_show(item.before)} -> {_show(item.after)}")
    output.write({
        "kind": "apply", "check": check, "ok": outcome.ok, "failed_hosts": outcome.failed_hosts,
        "unreachable_hosts": outcome.unreachable_hosts, "artifacts": str(outcome.artifact_dir),
        "changes": {h: [{"knob": c.knob, "before": c.before, "after": c.after} for c in changes.get(h, [])]
                    for h in hosts},
    })
    outcome.raise_for_failure("fabtune apply")
