"""``fabtune drift``: per-host, per-knob drift from the desired state; optional remediation."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fabtune import drift as lib
from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, absolute_path, result_output
from fabtune.commands._progress import Progress
from fabtune.errors import ExitStatus
from fabtune.inventory import read_inventory
from fabtune.paths import fabtune_home
from fabtune.profile import packaged


def _print(result: lib.DriftResult, console: Console) -> None:
    report = result.report
    if report.items:
        table = Table("host", "knob", "expected", "found", title=f"drift from the {result.source}")
        for item in report.items:
            # Text cells: a value such as "[ets, ets]" is data, never rich markup.
            cells = (item.host, item.knob, lib.show(item.expected), lib.show(item.found))
            table.add_row(*(Text(v) for v in cells))
        console.print(table)
    for host, why in sorted(report.failed.items()):
        console.print(f"[bold red]{escape(host)}: not checked[/]: {escape(why)}", highlight=False)
    summary = ", ".join(f"{h}: {report.count(h)}" for h in report.hosts)
    console.print(
        f"{len(report.items)} knob(s) drifted on {len(report.drifted_hosts)} host(s) ({summary})",
        highlight=False,
    )
    rem = result.remediation
    if rem is None:
        return
    for phase, bw in (("before", rem.before), ("after", rem.after)):
        if bw is not None:
            busbw = "-" if bw.busbw_gbytes is None else f"{bw.busbw_gbytes:.2f} GB/s"
            console.print(
                f"bandwidth {phase}: ib_write_bw mean {bw.pair_gbps:.1f} Gb/s (min "
                f"{bw.pair_min_gbps:.1f}), all_reduce busbw {busbw}",
                highlight=False,
            )
    if rem.rolled_back:
        console.print("[bold red]remediation rolled back[/]: " + "; ".join(rem.reasons), highlight=False)
    elif rem.remaining is not None and rem.remaining.drifted:
        console.print(f"[bold red]{len(rem.remaining.items)} knob(s) still drifted after remediation[/]")
    else:
        console.print("[green]remediated; bandwidth verified[/]")


@click.command("drift")
@click.option(
    "-i",
    "--inventory",
    required=True,
    type=click.Path(path_type=Path),
    callback=absolute_path,
    help="Ansible inventory of the hosts.",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Check against this profile instead of the fabric's tuned desired state.",
)
@click.option(
    "--remediate",
    is_flag=True,
    help="Apply the desired state, verify bandwidth (one pair round + a short all_reduce), "
    "roll back if it got worse.",
)
@click.option(
    "--textfile",
    type=click.Path(path_type=Path),
    default=None,
    help="Write Prometheus metrics here (node_exporter textfile collector), atomically.",
)
@result_output(legacy=True)
@click.option(
    "--tolerance",
    type=click.FloatRange(0.0, 0.5),
    default=lib.DEFAULT_TOLERANCE,
    show_default=True,
    help="Bandwidth drop (share) that counts as worse.",
)
@click.option(
    "--install-timer",
    is_flag=True,
    help="Write fabtune-drift.service and .timer (for this inventory/profile) and exit.",
)
@click.option(
    "--unit-dir",
    type=click.Path(path_type=Path),
    default=lib.UNIT_DIR,
    show_default=True,
    help="Where --install-timer writes the units.",
)
@click.option("--on-calendar", default="hourly", show_default=True, help="The timer's OnCalendar.")
@click.option(
    "--enable", is_flag=True, help="With --install-timer: also daemon-reload and enable --now the timer."
)
def drift(
    inventory: Path,
    profile_path: Path | None,
    remediate: bool,
    textfile: Path | None,
    output: ResultOutput,
    tolerance: float,
    install_timer: bool,
    unit_dir: Path,
    on_calendar: str,
    enable: bool,
) -> None:
    """Compare every host with the desired state, knob by knob (check mode: nothing changes).

    The desired state is --profile, else the tuned desired state the last tuning run of this
    fabric left ($FABTUNE_HOME/desired/FABRIC.yml). The report lists host, knob, expected, found.

    \b
    Exit codes (for monitoring):
      0  no drift (or drift remediated and bandwidth verified)
      8  drift found (without --remediate), remediation rolled back, or a host not checked
      1  failure (error during the run)    3  bad input (inventory, profile, no desired state)
      5  an Ansible run failed              9  another fabtune run holds the fabric's lock
    """
    if install_timer:
        if profile_path is not None:  # refused now, not by a timer failing every hour
            lib.desired_for(read_inventory(inventory), profile_path)
        units = lib.render_units(
            inventory.resolve(),
            profile=packaged(profile_path).resolve() if profile_path else None,
            remediate=remediate,
            textfile=textfile or lib.DEFAULT_TEXTFILE,
            executable=lib.fabtune_executable(),
            on_calendar=on_calendar,
            home=fabtune_home(),
        )
        for path in lib.install_units(units, unit_dir):
            output.echo(f"wrote {path}")
        if not enable:
            output.echo(f"enable it with: systemctl daemon-reload && systemctl enable --now {lib.TIMER}")
            return
        for argv in lib.enable_timer():
            output.echo(f"ran: {' '.join(argv)}")
        return
    info = read_inventory(inventory)
    run = lib.DriftRun(inventory, info, lib.desired_for(info, profile_path), profile=profile_path,
                       remediate=remediate, tolerance=tolerance, textfile=textfile)
    try:
        with Progress(console=_console.err()).status("checking drift") as emit:
            result = run.execute(emit)
    finally:
        _written(run, output)
    _print(result, output.console())
    if result.exit_status == ExitStatus.DRIFT_FOUND:
        hosts = sorted({*result.report.drifted_hosts, *result.report.failed})
        raise lib.DriftFound(
            f"drift found: {len(result.report.items)} knob(s) on {', '.join(hosts)}"
            + (" (remediation rolled back)" if result.remediation and result.remediation.rolled_back else "")
        )


def _written(run: lib.DriftRun, output: ResultOutput) -> None:
    """Where the report is, and the result as JSON where -o/--json asks (also after an error)."""
    if run.run and run.run.reports:
        _console.err().print(f"report: {run.run.reports['html']}", soft_wrap=True, highlight=False)
    result = run.result
    run_id = run.run.run_id if run.run else None
    output.write({"kind": "drift", "run_id": run_id, "exit": int(result.exit_status), "result": result})
