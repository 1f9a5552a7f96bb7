"""``fabtune tune`` and the run history verbs: ``runs``, ``show``, ``rollback``, ``resume``."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.table import Table

from fabtune import plugins
from fabtune.commands import _console
from fabtune.commands._common import INVENTORY_OPTION, RUN_ID_ARGUMENT, absolute_path, require_file
from fabtune.commands._progress import Progress
from fabtune.journal import Journal
from fabtune.profile import Profile, load_profile
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneResult


def _tune_profile(path: Path | None) -> Profile | None:
    """The --profile of tune/resume: checked whole, and it must hold fabtune_tune."""
    return None if path is None else load_profile(path, need="fabtune_tune")


def summary_table(result: TuneResult) -> Table:
    """The closing summary: each move, what happened and why."""
    table = Table(
        "move", "knobs", "outcome", "all_reduce busbw (median GB/s)", "why", title=f"run {result.run_id}"
    )
    for m in result.moves:
        median = sorted(m.all_reduce)[len(m.all_reduce) // 2] if m.all_reduce else 0.0
        colour = "green" if m.outcome == "kept" else "yellow"
        table.add_row(
            m.name,
            ", ".join(m.knobs),
            f"[{colour}]{m.outcome}[/]",
            f"{median:.1f} (was {m.reference:.1f})",
            m.reason,
        )
    return table


def print_result(result: TuneResult, report: Path) -> None:
    """The closing summary, the bandwidth change and where the report is (tune, resume, demo)."""
    console = _console.out()
    console.print(summary_table(result))
    base = sorted(result.baseline)[len(result.baseline) // 2]
    final = sorted(result.final)[len(result.final) // 2]
    console.print(
        f"all_reduce bus bandwidth: {base:.1f} -> {final:.1f} GB/s ({final / base - 1:+.1%}); "
        f"noise floor {result.noise_floor:.1%}"
    )
    html = report.with_suffix(".html")  # what a person opens; the JSON beside it is for scripts
    console.print(f"report: {html if html.is_file() else report}", soft_wrap=True, highlight=False)


@click.command("tune")
@INVENTORY_OPTION
@click.option(
    "--profile", type=click.Path(path_type=Path), help="Profile with a fabtune_tune section (options)."
)
@click.option("--jsonl", is_flag=True, help="Progress as JSON lines on stdout (for automation).")
def tune(inventory: Path, profile: Path | None, jsonl: bool) -> None:
    """Measure, change one knob group, keep what improves bandwidth, roll back the rest."""
    loaded = _tune_profile(profile)
    result, report = tune_run.tune(
        inventory,
        loaded.tune if loaded else None,
        Progress(jsonl),
        oracle=plugins.oracle,
        profile=loaded,
    )
    print_result(result, report)


@click.command("runs")
@click.option("--limit", type=int, default=20, show_default=True)
def runs(limit: int) -> None:
    """The run history (tune, bootstrap, drift)."""
    table = Table("run", "kind", "fabric", "state", "started", "summary")
    for r in Journal().runs(limit):
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        table.add_row(r.id, r.kind, r.fabric, r.state, started, str(r.summary.get("report", "")))
    _console.out().print(table)


@click.command("show")
@RUN_ID_ARGUMENT
def show(run_id: str) -> None:
    """Every journaled step of a run."""
    journal = Journal()
    run = journal.run(run_id)
    _console.out().print(f"run {run.id}: {run.kind} on {run.fabric} ({run.inventory}), {run.state}")
    table = Table("#", "kind", "name", "state", "detail")
    for s in journal.steps(run_id):
        detail = s.payload.get("reason") or s.payload.get("why") or ""
        table.add_row(str(s.seq), s.kind, s.name, s.state, str(detail))
    _console.out().print(table)


@click.command("rollback")
@RUN_ID_ARGUMENT
@click.option(
    "-i",
    "--inventory",
    type=click.Path(path_type=Path),
    default=None,
    callback=absolute_path,
    help="The hosts (default: the run's journaled inventory); needed when the journal cannot be used.",
)
@click.option(
    "--from-hosts",
    is_flag=True,
    help="Restore from the pre-run records the hosts keep, not the journal (a lost or damaged journal).",
)
def rollback(run_id: str, inventory: Path | None, from_hosts: bool) -> None:
    """Restore every managed knob on every host to its value before RUN_ID (verified).

    The pre-run state comes from the journal; with --from-hosts, or when the journal cannot be
    used or has no such run and -i is given, from the record each host keeps of the run's first
    change (/var/lib/fabtune/revert/RUN_ID.prerun.json).
    """
    if inventory is not None:
        require_file(inventory, "inventory")
    hosts = tune_run.rollback(run_id, Progress(), inventory=inventory, from_hosts=from_hosts)
    _console.out().print(f"restored {len(hosts)} hosts to their state before {run_id}: {', '.join(hosts)}")


@click.command("resume")
@RUN_ID_ARGUMENT
@click.option(
    "--profile",
    type=click.Path(path_type=Path),
    help="Profile whose fabtune_tune section replaces the run's own options.",
)
@click.option("--jsonl", is_flag=True, help="Progress as JSON lines on stdout.")
def resume(run_id: str, profile: Path | None, jsonl: bool) -> None:
    """Continue an interrupted run: undo its unfinished move, then try the moves not yet decided.

    The run keeps the tuning options it started with, unless --profile gives others.
    """
    loaded = _tune_profile(profile)
    result, report = tune_run.resume(run_id, Progress(jsonl), loaded.tune if loaded else None, profile=loaded)
    print_result(result, report)
