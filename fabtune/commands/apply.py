"""``fabtune apply``: validate a profile, apply it with the apply playbook, show each knob changed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from fabtune.ansible import RunOutcome, TaskResult, run_playbook
from fabtune.errors import ConfigError
from fabtune.profile import load_profile

VALIDATE_TASK = "Validate the desired fabric state"
CONF_ACTIONS = ("template", "ansible.builtin.template", "file", "ansible.builtin.file")


@dataclass(frozen=True)
class KnobChange:
    """One knob of one host that changed (or would change, in check mode)."""

    host: str
    knob: str
    before: Any
    after: Any


def _item_results(task: TaskResult) -> Iterable[Mapping[str, Any]]:
    results = task.result.get("results")
    if isinstance(results, list):
        return [r for r in results if isinstance(r, Mapping)]
    return [task.result]


def _conf_lines(text: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in str(text or "").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _diff_changes(host: str, result: Mapping[str, Any]) -> list[KnobChange]:
    """Per ``KEY=value`` line, the changes a template/file diff shows (``/etc/nccl.conf``)."""
    diffs = result.get("diff") or []
    out: list[KnobChange] = []
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        before, after = _conf_lines(diff.get("before")), _conf_lines(diff.get("after"))
        where = str(result.get("dest") or result.get("path") or diff.get("before_header") or "file")
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.append(KnobChange(host, f"{where}:{key}", before.get(key), after.get(key)))
    if not out and result.get("changed"):
        where = str(result.get("dest") or result.get("path") or "file")
        out.append(KnobChange(host, where, None, result.get("state") or "changed"))
    return out


def knob_changes(tasks: Sequence[TaskResult]) -> dict[str, list[KnobChange]]:
    """Per host, every knob changed, from the modules' ``changes`` (or a config file's diff).

    Args:
        tasks: the task results of an apply or drift run.

    Returns:
        Host to changes, in task order; hosts without changes are left out.
    """
    out: dict[str, list[KnobChange]] = {}
    for task in tasks:
        if task.event != "runner_on_ok":
            continue
        for result in _item_results(task):
            if not result.get("changed"):
                continue
            changes = result.get("changes")
            if isinstance(changes, list):
                found = [KnobChange(task.host, str(c.get("knob")), c.get("before"), c.get("after"))
                         for c in changes if isinstance(c, Mapping)]
            elif task.action in CONF_ACTIONS:
                found = _diff_changes(task.host, result)
            elif isinstance(result.get("item"), Mapping) and "key" in result["item"]:
                item = result["item"]
                knob = f"{result.get('path', 'file')}:{item['key']}"
                found = [KnobChange(task.host, knob, None, item.get("value"))]
            else:
                found = [KnobChange(task.host, task.task, None, "changed")]
            out.setdefault(task.host, []).extend(found)
    return out


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
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Ansible inventory of the hosts.")
@click.option("--profile", "profile_path", required=True, type=click.Path(path_type=Path),
              help="Profile (YAML with fabric_desired), e.g. inventory/profiles/roce.yml.")
@click.option("--check", is_flag=True, help="Change nothing: show what would change (drift).")
@click.option("--limit", default=None, help="Only these hosts (an Ansible host pattern).")
def apply(inventory: Path, profile_path: Path, check: bool, limit: str | None) -> None:
    """Apply a fabric profile to every host and show, per host, each knob changed (before -> after).

    Nothing changes on any host unless the profile validates, first here, then on every host
    (interfaces present, couplings agree).
    """
    profile = load_profile(profile_path)
    outcome = run_playbook("drift.yml" if check else "apply.yml", inventory,
                           extravars={"fabric_desired": profile.desired}, check=check, diff=True, limit=limit)
    problems = _host_problems(outcome)
    if problems:
        raise ConfigError(f"profile {profile_path}", problems)
    changes = knob_changes(outcome.tasks)
    verb = "would change" if check else "changed"
    for host in sorted(set(outcome.stats.get("ok", {})) | set(changes)):
        items = changes.get(host, [])
        click.echo(f"{host}: {len(items)} knob(s) {verb}" if items else f"{host}: unchanged")
        for item in items:
            click.echo(f"  {item.knob}: {_show(item.before)} -> {_show(item.after)}")
    outcome.raise_for_failure("fabtune apply")
