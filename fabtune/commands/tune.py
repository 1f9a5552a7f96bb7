"""``fabtune tune`` and the run history verbs: ``runs``, ``show``, ``rollback``, ``resume``."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from fabtune import plugins
from fabtune import rollback as rollbacks
from fabtune.commands._common import (
    INVENTORY_OPTION,
    MODEL_OPTION,
    NODES_OPTION,
    RUN_ID_ARGUMENT,
    ResultOutput,
    absolute_path,
    job_goal,
    require_file,
    result_output,
)
from fabtune.commands._progress import Progress
from fabtune.profile import Profile, load_profile
from fabtune.tune import preview, repair
from fabtune.tune import run as tune_run
from fabtune.tune.loop import TuneResult

PLAN_HOSTS_SHOWN = 6  # hosts named per move in the plan's table (the JSON names every one)


def _tune_profile(path: Path | None) -> Profile | None:
    """The --profile of tune/resume: checked whole, and it must hold fabtune_tune."""
    return None if path is None else load_profile(path, need="fabtune_tune")


def summary_table(result: TuneResult) -> Table:
    """The closing summary: each move, what happened and why."""
    table = Table(
        "move", "knobs", "outcome", "all_reduce busbw (median GB/s)", "why", title=f"run {result.run_id}"
    )
    for m in result.moves:
        median = statistics.median(m.all_reduce) if m.all_reduce else 0.0
        colour = "green" if m.outcome == "kept" else "yellow"
        was = "the job failed" if m.group == repair.GROUP else f"{m.reference:.1f}"  # no bandwidth before
        table.add_row(
            Text(m.name),
            Text(", ".join(m.knobs)),
            Text(m.outcome, style=colour),
            Text(f"{median:.1f} (was {was})"),
            Text(m.reason),
        )
    return table


def print_result(result: TuneResult, report: Path, output: ResultOutput | None = None) -> None:
    """The closing summary, the bandwidth change and where the report is (tune, resume, demo);
    the result as JSON where ``output`` asks for it."""
    output = output or ResultOutput()
    console = output.console()
    console.print(summary_table(result))
    # The median the progress lines and the report show (of an even count: the mean of the middle two)
    base, final = statistics.median(result.baseline), statistics.median(result.final)
    console.print(
        f"all_reduce bus bandwidth: {base:.1f} -> {final:.1f} GB/s ({final / base - 1:+.1%}); "
        f"noise floor {result.noise_floor:.1%}"
    )
    explained = {line for port in result.slow_ports for line in port.get("pairs", [])}
    for port in result.slow_ports:  # a port that explains its slow pairs, each listed under it
        console.print(f"ib_write_bw (rdma_cm): {port['summary']}", soft_wrap=True, highlight=False)
        for line in port.get("pairs", []):
            console.print(f"  slow pair: {line}", soft_wrap=True, highlight=False)
    for line in result.slow_pairs:
        if line not in explained:
            console.print(f"slow ib_write_bw pair (rdma_cm): {line}", soft_wrap=True, highlight=False)
    html = report.with_suffix(".html")  # what a person opens; the JSON beside it is for scripts
    console.print(f"report: {html if html.is_file() else report}", soft_wrap=True, highlight=False)
    output.write({"kind": "tune", "run_id": result.run_id, "report": str(report),
                  "report_html": str(html) if html.is_file() else None, "result": result})


def _jsonl_alone(jsonl: bool, output: ResultOutput) -> None:
    """--jsonl (the event stream) and a JSON result on stdout would share stdout: refused."""
    if jsonl and output.to_stdout:
        raise click.UsageError("--jsonl streams events on stdout: write the result with -o FILE, not --json")


@click.command("tune")
@INVENTORY_OPTION
@click.option(
    "--profile", type=click.Path(path_type=Path), help="Profile with a fabtune_tune section (options)."
)
@click.option(
    "--jsonl", is_flag=True,
    help="Progress events as JSON lines on stdout, as they happen (the result: --json / -o FILE).",
)
@click.option(
    "--plan", "plan_only", is_flag=True,
    help="Only read the hosts and show the moves a run would try, on which hosts, and its benchmark "
    "work; change nothing.",
)
@MODEL_OPTION
@NODES_OPTION
@result_output()
def tune(
    inventory: Path, profile: Path | None, jsonl: bool, plan_only: bool, job_spec: Path | None,
    target_nodes: int | None, output: ResultOutput,
) -> None:
    """Measure, change one knob group, keep what improves bandwidth, roll back the rest.

    With --model, the job's predicted MFU at --nodes is reported for the baseline and the tuned rack.
    With --plan, nothing is measured or changed: the moves the run would try are shown.
    """
    _jsonl_alone(jsonl, output)
    loaded = _tune_profile(profile)
    if plan_only:
        if jsonl or job_spec is not None or target_nodes is not None:
            raise click.UsageError("--plan shows the plan only: it takes no --jsonl, --model or --nodes")
        print_plan(preview.preview(inventory, loaded.tune if loaded else None, loaded), output)
        return
    goal = job_goal(job_spec, target_nodes)
    result, report = tune_run.tune(
        inventory,
        loaded.tune if loaded else None,
        Progress(jsonl),
        oracle=plugins.oracle,
        profile=loaded,
        goal=goal,
    )
    print_result(result, report, output)
    if goal is not None:
        _print_job(report, output)


def _hosts_text(hosts: Sequence[str], every: Sequence[str]) -> str:
    if list(hosts) == list(every):
        return f"all {len(every)}"
    shown = ", ".join(hosts[:PLAN_HOSTS_SHOWN])
    more = len(hosts) - PLAN_HOSTS_SHOWN
    return f"{shown} (+{more} more)" if more > 0 else shown


def print_plan(plan: preview.Plan, output: ResultOutput) -> None:
    """The plan as a table (one row per candidate move) with the run's benchmark work, and as JSON."""
    console = output.console()
    flow = (f"lossless class: {plan.lossless['says']}" if plan.lossless is not None
            else "credit-based flow control (no lossless class to choose)")
    console.print(f"{plan.fabric} rack, {len(plan.hosts)} hosts; {flow}",
                  markup=False, highlight=False, soft_wrap=True)
    table = Table("group", "move", "knobs", "hosts", "also ib_write_bw", "why")
    for group in plan.groups:
        for move in group:
            table.add_row(move.group, move.name, ", ".join(move.knobs), _hosts_text(move.hosts, plan.hosts),
                          "yes" if move.pairs else "no", Text(move.why))
    console.print(table)
    b = plan.bounds
    low, high = b.per_move_repetitions
    skipped = f"; groups skipped: {', '.join(plan.skipped_groups)}" if plan.skipped_groups else ""
    console.print(
        f"benchmark work: a baseline of {b.baseline_repetitions} nccl-tests repetitions (each one "
        f"all_reduce_perf and one alltoall_perf launch) and {b.baseline_pair_rounds} ib_write_bw rounds; "
        f"then {b.moves_at_least} to {b.moves_at_most} moves of {low} to {high} repetitions each, a kept "
        f"state's reference measured up to {b.top_up_after_keep}{skipped}.",
        markup=False, highlight=False, soft_wrap=True,
    )
    console.print(plan.note, markup=False, highlight=False, soft_wrap=True)
    output.write(plan)


def _print_job(report: Path, output: ResultOutput) -> None:
    """The job's predicted MFU at N, baseline -> final, as the run's report says it."""
    doc = json.loads(report.read_text()) if report.is_file() else {}
    summary = (doc.get("job") or {}).get("summary")
    if summary:
        output.console().print(summary, markup=False, highlight=False, soft_wrap=True)


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
@result_output()
def rollback(run_id: str, inventory: Path | None, from_hosts: bool, output: ResultOutput) -> None:
    """Restore every managed knob on every host to its value before RUN_ID (verified): a tune,
    apply or drift remediation run.

    The pre-run state comes from the journal; with --from-hosts, or when the journal cannot be
    used or has no such run and -i is given, from the record each host keeps of the run's first
    change (/var/lib/fabtune/revert/RUN_ID.prerun.json).
    """
    if inventory is not None:
        require_file(inventory, "inventory")
    hosts = rollbacks.rollback(run_id, Progress(), inventory=inventory, from_hosts=from_hosts)
    output.write({"kind": "rollback", "run_id": run_id, "restored": hosts})
    output.console().print(f"restored {len(hosts)} hosts to their state before {run_id}: {', '.join(hosts)}")


@click.command("resume")
@RUN_ID_ARGUMENT
@click.option(
    "--profile",
    type=click.Path(path_type=Path),
    help="Profile whose fabtune_tune section replaces the run's own options.",
)
@click.option(
    "--jsonl", is_flag=True,
    help="Progress events as JSON lines on stdout, as they happen (the result: --json / -o FILE).",
)
@MODEL_OPTION
@NODES_OPTION
@result_output()
def resume(
    run_id: str, profile: Path | None, jsonl: bool, job_spec: Path | None, target_nodes: int | None,
    output: ResultOutput,
) -> None:
    """Continue an interrupted run: undo its unfinished move, then try the moves not yet decided.

    The run keeps the tuning options it started with, unless --profile gives others. With --model,
    the job's predicted MFU at --nodes is reported for the baseline and the tuned rack, as by tune.
    """
    _jsonl_alone(jsonl, output)
    loaded = _tune_profile(profile)
    goal = job_goal(job_spec, target_nodes)
    result, report = tune_run.resume(
        run_id, Progress(jsonl), loaded.tune if loaded else None, profile=loaded, goal=goal
    )
    print_result(result, report, output)
    if goal is not None:
        _print_job(report, output)
