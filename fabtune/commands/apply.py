"""``fabtune apply``: validate a profile, apply it (a journaled run under the fabric lock), show each
knob changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fabtune import apply as lib
from fabtune.commands._common import ResultOutput, absolute_path, result_output
from fabtune.profile import load_profile


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
    The run is journaled with the hosts' state before it (`fabtune rollback RUN` restores it) and
    holds the fabric's lock; --check is journaled as a check and changes nothing.
    """
    profile = load_profile(profile_path, need="fabric_desired")
    result = lib.apply(inventory, profile, check=check, limit=limit)
    verb = "would change" if check else "changed"
    for host in result.hosts:
        items = result.changes.get(host, [])
        output.echo(f"{host}: {len(items)} knob(s) {verb}" if items else f"{host}: unchanged")
        for item in items:
            output.echo(f"  {item.knob}: {_show(item.before)} -> {_show(item.after)}")
    outcome = result.outcome
    output.write({
        "kind": "apply", "run_id": result.run_id, "check": check, "ok": outcome.ok,
        "failed_hosts": outcome.failed_hosts, "unreachable_hosts": outcome.unreachable_hosts,
        "artifacts": str(outcome.artifact_dir),
        "changes": {h: [{"knob": c.knob, "before": c.before, "after": c.after}
                        for c in result.changes.get(h, [])] for h in result.hosts},
    })
    outcome.raise_for_failure("fabtune apply")
