"""``fabtune uninstall``: remove what fabtune put on the hosts, optionally after restoring a run."""

from __future__ import annotations

from pathlib import Path

import click

from fabtune import uninstall as lib
from fabtune.commands._common import INVENTORY_OPTION, ResultOutput, require_file, result_output
from fabtune.commands._progress import Progress


@click.command("uninstall")
@INVENTORY_OPTION
@click.option(
    "--restore",
    "restore",
    metavar="RUN",
    default=None,
    help="First put every host back to its state before RUN (the journal's pre-run snapshot, verified).",
)
@click.option("--check", is_flag=True, help="Change nothing: show what would be removed.")
@result_output()
def uninstall(inventory: Path, restore: str | None, check: bool, output: ResultOutput) -> None:
    """Remove everything fabtune installed on the hosts: the boot units, udev rule and scripts, the
    host-side revert and its records, /etc/nccl.conf when fabtune wrote it.

    The NIC settings in effect are left as they are (nothing re-applies them at boot any more);
    --restore RUN puts them back to what they were before RUN first. Nothing changes while a
    commit-confirmed run other than RUN is armed on a host (exit 9).
    """
    require_file(inventory, "inventory")
    result = lib.uninstall(inventory, restore=restore, check=check, on_event=Progress())
    if result.restored:
        output.echo(f"restored {len(result.restored)} hosts to their state before {restore}: "
                   f"{', '.join(result.restored)}")
    verb = "would remove" if check else "removed"
    if not result.removed:
        output.echo("nothing of fabtune's is installed on the hosts")
    for host, items in sorted(result.removed.items()):
        output.echo(f"{host}: {verb} {len(items)}: {', '.join(items)}")
    output.echo(f"run {result.run_id}")
    output.write({"kind": "uninstall", "result": result})
