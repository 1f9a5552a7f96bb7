"""``fabtune drift``: per-host, per-knob drift from the desired state; optional remediation."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fabtune import drift as lib
from fabtune import report as reports
from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, absolute_path, result_output
from fabtune.commands._progress import Progress
from fabtune.errors import ExitStatus
from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.lock import fabric_lock
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
@click.pass_context
def drift(
    ctx: click.Context,
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
    source = lib.desired_for(info, profile_path)
    console = _console.err()
    journal = Journal()
    run_id = journal.open_run("drift", info.name, str(inventory), str(profile_path) if profile_path else None)
    result = lib.DriftResult(info.name, source.source, lib.DriftReport(info.hosts, ()))
    try:
        with fabric_lock(info.name, "drift" + (" remediation" if remediate else "")):
            seq = journal.step(run_id, "check", "drift check", {"source": source.source})
            with console.status("checking drift"):
                report = lib.detect(inventory, source.desired, info.hosts)
            journal.finish_step(run_id, seq, "done", lib.drift_payload(report, source.source))
            result = lib.DriftResult(info.name, source.source, report)
            if remediate and report.drifted:
                with Progress(console=console).status("remediating") as say:
                    rem = lib.remediate(
                        inventory,
                        info,
                        source.desired,
                        report,
                        journal=journal,
                        run_id=run_id,
                        tolerance=tolerance,
                        progress=say,
                    )
                result = lib.DriftResult(info.name, source.source, report, rem)
    except BaseException as err:  # an interrupt or SIGTERM (a timeout) is journaled too
        result = lib.DriftResult(
            info.name, source.source, result.report, result.remediation, lib.describe_error(err)
        )
        _finish(journal, run_id, result, textfile, output)
        raise
    _finish(journal, run_id, result, textfile, output)
    _print(result, output.console())
    status = result.exit_status
    if status == ExitStatus.DRIFT_FOUND:
        hosts = sorted({*result.report.drifted_hosts, *result.report.failed})
        raise lib.DriftFound(
            f"drift found: {len(result.report.items)} knob(s) on {', '.join(hosts)}"
            + (" (remediation rolled back)" if result.remediation and result.remediation.rolled_back else "")
        )
    if status != ExitStatus.OK:
        ctx.exit(int(status))


def _finish(
    journal: Journal, run_id: str, result: lib.DriftResult, textfile: Path | None, output: ResultOutput
) -> None:
    state = {ExitStatus.OK: "clean", ExitStatus.DRIFT_FOUND: "drift"}.get(result.exit_status, "failed")
    if result.remediation is not None:
        state = "rolled_back" if result.remediation.rolled_back else "remediated"
    if result.error:
        state = "failed"
    journal.close_run(
        run_id,
        state,
        {
            "knobs": len(result.report.items),
            "hosts": result.report.drifted_hosts,
            "error": result.error,
            "exit": int(result.exit_status),
            "report": str(reports.report_dir(run_id) / "report.json"),
        },
    )
    written = reports.write_quietly(journal, run_id)
    journal.close()
    if written:
        _console.err().print(f"report: {written['html']}", soft_wrap=True, highlight=False)
    if textfile is not None:
        lib.write_textfile(textfile, lib.prometheus_text(result))
    output.write({"kind": "drift", "run_id": run_id, "exit": int(result.exit_status), "result": result})
