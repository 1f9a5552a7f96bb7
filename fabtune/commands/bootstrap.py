"""``fabtune bootstrap``: prove a new rack is right, apply its baseline profile, accept it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from fabtune import bootstrap as lib
from fabtune.commands import _console
from fabtune.commands._common import (
    MODEL_OPTION,
    NODES_OPTION,
    ResultOutput,
    absolute_path,
    job_goal,
    require_file,
    result_output,
)
from fabtune.commands._progress import Progress
from fabtune.profile import load_profile

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def _print(report: lib.BootstrapReport, console: Console) -> None:
    hosts = Table("host", "check", "verdict", "summary", "evidence", title="per host")
    for c in sorted(report.checks, key=lambda c: (c.host == "*", c.host, c.check)):
        hosts.add_row(c.host, c.check, f"[{STYLE[c.verdict]}]{c.verdict}[/]", c.summary, c.evidence)
    console.print(hosts)
    if report.pairs or report.retests:
        table = Table(
            "client -> server", "NIC", "Gb/s", "ceiling", "share", "verdict", "note", title="per pair"
        )
        for p in [*report.pairs, *report.retests]:
            table.add_row(
                f"{p.client} -> {p.server}",
                p.device,
                "-" if p.gbps is None else f"{p.gbps:.1f}",
                f"{p.ceiling_gbps:.1f}",
                "-" if p.share is None else f"{p.share:.0%}",
                f"[{STYLE[p.verdict]}]{p.verdict}[/]",
                p.note or (p.error or ""),
            )
        console.print(table)
    if report.passed:
        console.print(f"[green]bootstrap passed[/]: fabric {report.fabric} accepted with {report.profile}")
    else:
        stop = {
            "preflight": "preflight failed: nothing was applied",
            "apply": "the profile could not be applied",
            "acceptance": "acceptance did not finish",
            "done": "acceptance failed",
            "job gate": "the rack was accepted, but the job's predicted MFU is below --min-mfu",
        }[report.phase]
        blamed = ", ".join(report.failed_hosts) or "none named (rack-wide)"
        at_fault = "" if report.phase == "job gate" else f"; hosts at fault: {blamed}"
        console.print(f"[bold red]bootstrap failed[/] ({stop}){at_fault}", highlight=False)


@click.command("bootstrap")
@click.option(
    "-i",
    "--inventory",
    required=True,
    type=click.Path(path_type=Path),
    callback=absolute_path,
    help="Ansible inventory of the new rack.",
)
@click.option(
    "--profile",
    "profile_path",
    required=True,
    type=click.Path(path_type=Path),
    help="The baseline profile (YAML with fabric_desired).",
)
@result_output(legacy=True)
@click.option(
    "--pair-threshold",
    type=click.FloatRange(0.0, 1.0),
    default=0.9,
    show_default=True,
    help="ib_write_bw per pair must reach this share of the link's physical ceiling.",
)
@click.option(
    "--busbw-threshold",
    type=click.FloatRange(0.0, 1.0),
    default=0.8,
    show_default=True,
    help="all_reduce busbw per GPU must reach this share of NICs x ceiling / 8 (GB/s).",
)
@MODEL_OPTION
@NODES_OPTION
@click.option("--min-mfu", type=click.FloatRange(0.0, 1.0, min_open=True), default=None,
              help="Fail the bootstrap when --model's predicted MFU at --nodes is below this.")
def bootstrap(
    inventory: Path,
    profile_path: Path,
    output: ResultOutput,
    pair_threshold: float,
    busbw_threshold: float,
    job_spec: Path | None,
    target_nodes: int | None,
    min_mfu: float | None,
) -> None:
    """Preflight a new rack, apply its baseline profile and run the acceptance benchmarks.

    Preflight (nothing changes if it fails): hosts reachable; the tools fabtune runs installed
    (a missing one named with its package); ports up at one rate; one firmware per HCA model;
    GPU-NIC affinity; one RoCEv2 GID index; a subnet manager (InfiniBand). Then the profile, then
    ib_write_bw over every pair (a suspect pair's hosts are re-tested against a known-good partner
    before one is blamed; a pair whose ends both pass that way runs once more, and a pass then is a
    slow run, a warning), all_reduce_perf bus bandwidth and the NCCL transport.

    With --model, once the rack is accepted the job's predicted MFU at --nodes (from the acceptance
    busbw) is reported, and below --min-mfu the bootstrap fails (the phase "job gate").

    Exits 0 when the rack is accepted, 7 when any check fails (the hosts at fault are named) or the
    job's predicted MFU is below --min-mfu.
    """
    require_file(inventory, "inventory")
    profile = load_profile(profile_path, need="fabric_desired")  # validated before anything runs
    goal = job_goal(job_spec, target_nodes, min_mfu)
    with Progress(console=_console.err()).status("bootstrap") as emit:
        report, run = lib.bootstrap(
            inventory, profile, pair_threshold=pair_threshold, busbw_threshold=busbw_threshold, on_event=emit,
            goal=goal,
        )
    _print(report, output.console())
    if report.gate is not None:
        output.console().print(report.gate.line(), markup=False, highlight=False)
    if run.reports:
        _console.err().print(f"report: {run.reports['html']}", soft_wrap=True, highlight=False)
    found = report.gate
    job_doc = {"job": {**dataclasses.asdict(found), "passed": found.passed}} if found else {}
    doc = {"kind": "bootstrap", "run_id": run.run_id, "passed": report.passed, "report": report}
    output.write({**doc, **job_doc})
    if found is not None and not found.passed:
        raise lib.BootstrapFailed(f"the rack was accepted, but {found.line()}")
    if not report.passed:
        raise lib.BootstrapFailed(
            f"bootstrap of {report.fabric} failed at {report.phase}; hosts at fault: "
            f"{', '.join(report.failed_hosts) or 'none named (rack-wide)'}"
        )

