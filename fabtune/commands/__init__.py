"""One module per verb; each exposes one click command or group. Plugins add their own verbs
(``fabtune.plugins``; the emulated rack's ``testbed`` and ``demo``).

A verb's module is imported only when that verb runs (or ``--help`` lists the verbs): ``fabtune
runs`` never loads the tuning loop, paramiko or the advisor."""

from __future__ import annotations

import importlib

import click

VERBS: dict[str, str] = {
    "tune": "fabtune.commands.tune:tune",
    "apply": "fabtune.commands.apply:apply",
    "bootstrap": "fabtune.commands.bootstrap:bootstrap",
    "drift": "fabtune.commands.drift:drift",
    "bench": "fabtune.commands.bench:bench",
    "check": "fabtune.commands.check:check",
    "runs": "fabtune.commands.runs:runs",
    "show": "fabtune.commands.runs:show",
    "rollback": "fabtune.commands.tune:rollback",
    "resume": "fabtune.commands.tune:resume",
    "report": "fabtune.commands.report:report",
    "parse": "fabtune.commands.parse:parse",
    "advise": "fabtune.commands.advise:advise",
    "uninstall": "fabtune.commands.uninstall:uninstall",
}
"""Each verb of fabtune and where its command is (``module:attribute``)."""


def load(name: str) -> click.Command | None:
    """The command of verb ``name`` (its module imported now); None when fabtune has no such verb."""
    where = VERBS.get(name)
    if where is None:
        return None
    module, _, attribute = where.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command), where
    return command
