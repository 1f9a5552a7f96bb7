"""``fabtune runs`` and ``fabtune show RUN``: the run history and one run's steps, from the journal alone."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from fabtune.commands._common import RUN_ID_ARGUMENT, ResultOutput, result_output
from fabtune.journal import Journal


@click.command("runs")
@click.option("--limit", type=int, default=20, show_default=True)
@result_output()
def runs(limit: int, output: ResultOutput) -> None:
    """The run history (tune, bootstrap, drift, apply, uninstall)."""
    table = Table("run", "kind", "fabric", "state", "started", "summary")
    found = Journal().runs(limit)
    for r in found:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        table.add_row(r.id, r.kind, r.fabric, r.state, started, str(r.summary.get("report", "")))
    output.console().print(table)
    output.write({"kind": "runs", "runs": found})


@click.command("show")
@RUN_ID_ARGUMENT
@result_output()
def show(run_id: str, output: ResultOutput) -> None:
    """Every journaled step of a run, and the Ansible runs it made with their artifact directories."""
    journal = Journal()
    try:
        run = journal.run(run_id)
        steps = journal.steps(run_id)
        artifacts = journal.artifacts(run_id)
    finally:
        journal.close()
    console = output.console()
    console.print(f"run {run.id}: {run.kind} on {run.fabric} ({run.inventory}), {run.state}", highlight=False)
    table = Table("#", "kind", "name", "state", "detail")
    for s in steps:
        detail = s.payload.get("reason") or s.payload.get("why") or ""
        table.add_row(str(s.seq), s.kind, s.name, s.state, Text(str(detail)))
    console.print(table)
    if artifacts:
        shown = Table("ansible run", "status", "artifacts", title="Ansible artifacts")
        for a in artifacts:
            kept = "" if Path(a.path).is_dir() else " (rotated away)"
            shown.add_row(a.kind, a.status, Text(a.path + kept))
        console.print(shown)
    output.write({"kind": "show", "run": run, "steps": steps, "artifacts": artifacts})
