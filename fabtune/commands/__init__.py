"""One module per verb; each exposes one click command or group. Plugins add their own verbs
(``fabtune.plugins``; the emulated rack's ``testbed`` and ``demo``)."""

from __future__ import annotations

import click

from fabtune.commands.advise import advise
from fabtune.commands.apply import apply
from fabtune.commands.bench import bench
from fabtune.commands.bootstrap import bootstrap
from fabtune.commands.check import check
from fabtune.commands.drift import drift
from fabtune.commands.parse import parse
from fabtune.commands.report import report
from fabtune.commands.tune import resume, rollback, runs, show, tune
from fabtune.commands.uninstall import uninstall

COMMANDS: list[click.Command] = [
    tune,
    apply,
    bootstrap,
    drift,
    bench,
    check,
    runs,
    show,
    rollback,
    resume,
    report,
    parse,
    advise,
    uninstall,
]
