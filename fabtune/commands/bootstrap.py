"""``fabtune bootstrap``: prove a new rack is right, apply its baseline profile, accept it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from fabtune import bootstrap as lib
from fabtune.advise.gate import GateResult, gate
from fabtune.advise.job import JobSpec, fit, load_job
from fabtune.advise.measured import from_run
from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, absolute_path, require_file, result_output
from fabtune.commands._progress import Progress
from fabtune.journal import Journal
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
        }[report.phase]
        console.print(
            f"[bold red]bootstrap failed[/] ({stop}); hosts at fault: "
            f"{', '.join(report.failed_hosts) or 'none named (rack-wide)'}",
            highlight=False,
        )


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
@click.option("--model", "job_spec", type=click.Path(path_type=Path), default=None, callback=absolute_path,
              help="A training job spec (docs/advisor.md): its predicted MFU at --nodes is reported.")
@click.option("--nodes", "target_nodes", type=click.IntRange(1, 1 << 20), default=None,
              help="The target cluster size for --model (default: the rack's own size).")
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
    before one is blamed), all_reduce_perf bus bandwidth and the NCCL transport.

    Exits 0 when the rack is accepted, 7 when any check fails (the hosts at fault are named).
    """
    require_file(inventory, "inventory")
    profile = load_profile(profile_path, need="fabric_desired")  # validated before anything runs
    if (min_mfu is not None or target_nodes is not None) and job_spec is None:
        raise click.UsageError("--min-mfu and --nodes need --model (the job spec)")
    job = load_job(require_file(job_spec, "--model")) if job_spec is not None else None
    if job is not None and target_nodes is not None:
        fit(job, target_nodes)  # a job that cannot fill the target is refused before anything runs
    with Progress(console=_console.err()).status("bootstrap") as say:
        report, run = lib.bootstrap(
            inventory, profile, pair_threshold=pair_threshold, busbw_threshold=busbw_threshold, progress=say
        )
    _print(report, output.console())
    if run.reports:
        _console.err().print(f"report: {run.reports['html']}", soft_wrap=True, highlight=False)
    if not report.passed:
        output.write({"kind": "bootstrap", "run_id": run.run_id, "passed": report.passed, "report": report})
        raise lib.BootstrapFailed(
            f"bootstrap of {report.fabric} failed at {report.phase}; hosts at fault: "
            f"{', '.join(report.failed_hosts) or 'none named (rack-wide)'}"
        )
    found = _job_gate(job, run.run_id, target_nodes, min_mfu, output) if job is not None else None
    job_doc = {"job": {**dataclasses.asdict(found), "passed": found.passed}} if found else {}
    doc = {"kind": "bootstrap", "run_id": run.run_id, "passed": report.passed, "report": report}
    output.write({**doc, **job_doc})
    if found is not None and not found.passed:
        raise lib.BootstrapFailed(f"the rack was accepted, but {found.line()}")


def _job_gate(
    job: JobSpec, run_id: str, nodes: int | None, min_mfu: float | None, output: ResultOutput
) -> GateResult:
    """The job's predicted MFU at the target size from this run's acceptance busbw (printed)."""
    journal = Journal()
    try:
        measured = from_run(journal, run_id)
    finally:
        journal.close()
    found = gate(job, measured, nodes or measured.nodes, min_mfu)
    output.console().print(found.line(), markup=False, highlight=False)
    return found
