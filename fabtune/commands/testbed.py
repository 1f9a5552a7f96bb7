"""``fabtune testbed``: build, inspect, reach and remove an emulated rack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from fabtune.errors import ExitStatus, TestbedError
from fabtune.testbed import build, layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.reboot import reboot as reboot_hosts
from fabtune.testbed.spec import check_testbed_name, load_spec


def _testbed_name(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Click callback: refuse a name that is not a testbed name before anything runs."""
    return None if value is None else check_testbed_name(value, "--name")


NAME_OPTION = click.option(
    "--name", default="fab", show_default=True, callback=_testbed_name, help="Testbed name."
)


@click.group("testbed")
def testbed() -> None:
    """Emulated racks: GPU nodes as namespaces with real sshd, for trying changes on a twin."""


@testbed.command("up")
@click.option("--hosts", "hosts", type=int, help="Number of hosts (2-32).")
@click.option("--fabric", type=click.Choice(["roce", "ib"]), help="Fabric type.")
@click.option("--spec", "spec_file", type=click.Path(path_type=Path), help="Rack spec (YAML).")
@click.option(
    "--name", default=None, callback=_testbed_name, help="Testbed name (default: the spec's, else 'fab')."
)
def up(hosts: int | None, fabric: str | None, spec_file: Path | None, name: str | None) -> None:
    """Build a rack (recovering a stale one of the same name)."""
    spec = load_spec(spec_file, {"hosts": hosts, "fabric": fabric, "name": name})
    console = Console(stderr=True)
    with console.status(f"building testbed {spec.name!r}") as shown:
        path = build.up(spec, lambda step: shown.update(f"testbed {spec.name!r}: {step}"))
    console.print(f"testbed {spec.name!r}: {len(spec.hosts)} {spec.fabric} hosts up")
    click.echo(path / "inventory.yml")


@testbed.command("down")
@NAME_OPTION
def down(name: str) -> None:
    """Remove a rack: processes, namespaces, links, mounts and files."""
    build.down(name)
    Console(stderr=True).print(f"testbed {name!r} removed")


@testbed.command("reboot")
@click.argument("name", callback=lambda _c, _p, v: check_testbed_name(v, "NAME"))
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
def reboot(name: str, hosts: tuple[str, ...]) -> None:
    """Reboot a rack's hosts (all, or each HOST): every process restarts, NIC and kernel settings
    go back to their power-on values, the disk is kept, and the boot units run."""
    console = Console(stderr=True)
    with console.status(f"rebooting testbed {name!r}") as shown:
        done = reboot_hosts(name, hosts, lambda step: shown.update(f"testbed {name!r}: {step}"))
    console.print(f"testbed {name!r}: rebooted {', '.join(done)}")


@testbed.command("status")
@NAME_OPTION
@click.pass_context
def status(ctx: click.Context, name: str) -> None:
    """Show each host's namespace, init process and sshd; exit non-zero unless all are up."""
    rows = build.status(name)
    if not rows:
        raise TestbedError(f"no testbed named {name!r}")
    table = Table("host", "address", "netns", "running", "ssh")
    for row in rows:
        table.add_row(
            row.name, row.mgmt_ip, *("yes" if v else "NO" for v in (row.netns, row.running, row.ssh))
        )
    Console().print(table)
    if not all(r.netns and r.running and r.ssh for r in rows):
        ctx.exit(int(ExitStatus.TESTBED))


@testbed.command("inventory")
@NAME_OPTION
def inventory(name: str) -> None:
    """Print the path of the rack's Ansible inventory."""
    path = layout.testbed_dir(name) / "inventory.yml"
    if not path.exists():
        raise TestbedError(f"no testbed named {name!r} (run 'fabtune testbed up')")
    click.echo(path)


@testbed.command("ssh", context_settings={"ignore_unknown_options": True})
@NAME_OPTION
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def ssh(ctx: click.Context, name: str, host: str, command: tuple[str, ...]) -> None:
    """Open a shell on HOST, or run COMMAND there."""
    argv = ssh_argv(name, host, " ".join(command), tty=not command and sys.stdin.isatty())
    ctx.exit(subprocess.run(argv, check=False).returncode)
