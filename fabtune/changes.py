"""Per host and knob, what an apply run changed (before -> after), read from the task results.

Library code shared by ``fabtune apply``, ``bootstrap`` and ``drift``: the modules' ``changes``
lists and the nccl.conf diff, never the playbook's stdout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabtune.ansible import TaskResult
from fabtune.formats import parse_nccl_conf

CONF_ACTIONS = (
    "template", "ansible.builtin.template", "file", "ansible.builtin.file", "fabtune.fabric.fabric_files",
)


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
    """A ``*.conf`` diff side's ``KEY=value`` lines (nccl.conf's parser, the hosts' own)."""
    return parse_nccl_conf(str(text or ""))


def _diff_changes(host: str, result: Mapping[str, Any]) -> list[KnobChange]:
    """What a file diff shows: per ``KEY=value`` line of a ``*.conf`` file (``/etc/nccl.conf``),
    else the file as a whole (a script or unit fabtune installs)."""
    diffs = result.get("diff") or []
    out: list[KnobChange] = []
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        where = str(result.get("dest") or result.get("path") or diff.get("before_header") or "file")
        if not where.endswith(".conf"):
            if diff.get("before") != diff.get("after"):
                out.append(KnobChange(host, where, "present" if diff.get("before") else None, "installed"))
            continue
        before, after = _conf_lines(diff.get("before")), _conf_lines(diff.get("after"))
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.append(KnobChange(host, f"{where}:{key}", before.get(key), after.get(key)))
    if not out and result.get("changed"):  # the text changed, no setting did (a header, comments)
        headers = [str(d.get("after_header") or d.get("before_header") or "") for d in diffs
                   if isinstance(d, Mapping)] if isinstance(diffs, list) else []
        where = str(result.get("dest") or result.get("path") or next((h for h in headers if h), "file"))
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
