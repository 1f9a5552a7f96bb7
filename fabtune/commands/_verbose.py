"""``-v`` / ``-vv``: the Ansible task stream, live, on stderr (read from runner events).

``-v``: one line per task result (``kind: host: task: ok|changed|failed|unreachable|skipped``,
with the reason of a failure) and, when a run ends, its status and artifact directory. ``-vv``
adds the command line each ``command`` task ran (the benchmark command lines among them).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from rich.console import Console

from fabtune.ansible import RunOutcome, TaskResult
from fabtune.commands import _console

FAILED_EVENTS = frozenset({"runner_on_failed", "runner_item_on_failed"})


def outcome_word(task: TaskResult) -> str:
    """ok, changed, failed, unreachable or skipped: what the event says of this result."""
    if task.event == "runner_on_unreachable":
        return "unreachable"
    if task.event in FAILED_EVENTS:
        return "failed"
    if task.event == "runner_on_skipped" or task.result.get("skipped"):
        return "skipped"
    return "changed" if task.changed else "ok"


def _item(result: Mapping[str, Any]) -> str:
    label = result.get("_ansible_item_label", result.get("item"))
    return "" if label is None else f" ({label})"


def _command(result: Mapping[str, Any]) -> str | None:
    """The command line a task ran: the result's ``cmd`` (command, shell, async_status of one),
    else the argv it was given (``invocation``)."""
    invocation = result.get("invocation") or {}
    args = invocation.get("module_args") or {} if isinstance(invocation, Mapping) else {}
    cmd = result.get("cmd") or (args.get("argv") if isinstance(args, Mapping) else None)
    if isinstance(cmd, list):
        return shlex.join(str(a) for a in cmd)
    return cmd if isinstance(cmd, str) and cmd else None


class AnsibleStream:
    """An observer of the Ansible adapter that prints the task stream (``fabtune -v``)."""

    def __init__(self, level: int, console: Console | None = None) -> None:
        self.level = level
        self.console = console or _console.err()

    def _say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def task(self, kind: str, result: TaskResult) -> None:
        word = outcome_word(result)
        line = f"{kind}: {result.host}: {result.task}{_item(result.result)}: {word}"
        if word in ("failed", "unreachable"):
            msg = str(result.result.get("msg") or result.result.get("stderr") or "").strip()
            line += f": {msg.splitlines()[0]}" if msg else ""
        self._say(line)
        command = _command(result.result) if self.level >= 2 else None
        if command is not None and "results" not in result.result:  # a loop's items carry their own
            self._say(f"{kind}: {result.host}:   $ {command}")

    def finished(self, kind: str, outcome: RunOutcome) -> None:
        self._say(f"{kind}: {outcome.status} (rc {outcome.rc}), artifacts {outcome.artifact_dir}")
