"""``fabtune check``: the checks practitioners run by hand, each with its evidence."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from fabtune.commands import _console
from fabtune.commands._common import INVENTORY_OPTION, OOB_OPTION, ResultOutput, require_file, result_output
from fabtune.errors import ChecksFailed
from fabtune.perf.checkrun import run_checks

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


@click.command("check")
@INVENTORY_OPTION
@result_output(legacy=True)
@OOB_OPTION
@click.option("--no-nccl", is_flag=True, help="Skip the short nccl-tests run that checks the transport.")
def check(
    inventory: Path, output: ResultOutput, oob_interface: str | None, no_nccl: bool
) -> None:
    """GPU-NIC affinity, RDMA transport (no TCP fallback), GID index, links, subnet manager.

    Exits 7 when any check fails.
    """
    require_file(inventory, "inventory")
    with _console.err().status("checking the fabric"):
        results = run_checks(inventory, with_nccl=not no_nccl, oob_interface=oob_interface)
    table = Table("check", "host", "verdict", "summary", "evidence", show_lines=False)
    for r in results:
        table.add_row(r.check, r.host, f"[{STYLE[r.verdict]}]{r.verdict}[/]", r.summary, r.evidence)
    output.console().print(table)
    output.write({"kind": "check", "results": results})
    failed = [f"{r.check} on {r.host}" for r in results if r.verdict == "fail"]
    if failed:
        raise ChecksFailed(f"{len(failed)} check(s) failed: {', '.join(failed)}")
