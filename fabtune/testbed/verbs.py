"""``fabtune testbed``: build, inspect, reach and remove an emulated rack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
from rich.table import Table

from fabtune.commands import _console
from fabtune.commands._common import ResultOutput, result_output
from fabtune.errors import ExitPassedOn, TestbedError
from fabtune.testbed import build, layout
from fabtune.testbed.access import ssh_argv
from fabtune.testbed.reboot import reboot as reboot_hosts
from fabtune.testbed.spec import check_testbed_name, load_spec


def _testbed_name(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Click callback: refuse a name that is not a testbed name before anything runs."""
    return None if value is None else check_testbed_name(value, "--name")


def _one_testbed(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """Click callback: the named testbed, or the only one there is; otherwise say which exist."""
    if value is not None:
        return check_testbed_name(value, "--name")
    names = build.existing()
    if len(names) == 1:
        return names[0]
    if not names:
        raise TestbedError("no testbed is up here (run 'fabtune testbed up')")
    raise TestbedError(f"several testbeds are up, name one with --name: {', '.join(names)}")


NAME_OPTION = click.option(
    "--name", default=None, callback=_one_testbed, help="Testbed name (default: the only one up)."
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
    console = _console.err()
    with console.status(f"building testbed {spec.name!r}") as shown:
        path = build.up(spec, lambda step: shown.update(f"testbed {spec.name!r}: {step}"))
    console.print(f"testbed {spec.name!r}: {len(spec.hosts)} {spec.fabric} hosts up")
    click.echo(path / "inventory.yml")


@testbed.command("down")
@NAME_OPTION
def down(name: str) -> None:
    """Remove a rack: processes, namespaces, links, mounts and files."""
    build.down(name)
    _console.err().print(f"testbed {name!r} removed")


@testbed.command("reboot")
@click.argument("name", callback=lambda _c, _p, v: check_testbed_name(v, "NAME"))
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
def reboot(name: str, hosts: tuple[str, ...]) -> None:
    """Reboot a rack's hosts (all, or each HOST): every process restarts, NIC and kernel settings
    go back to their power-on values, the disk is kept, and the boot units run."""
    console = _console.err()
    with console.status(f"rebooting testbed {name!r}") as shown:
        done = reboot_hosts(name, hosts, lambda step: shown.update(f"testbed {name!r}: {step}"))
    console.print(f"testbed {name!r}: rebooted {', '.join(done)}")


@testbed.command("status")
@click.option("--name", default=None, callback=_testbed_name, help="Testbed name (default: list them all).")
@result_output()
def status(name: str | None, output: ResultOutput) -> None:
    """Show each host's namespace, init process and sshd; exit non-zero unless all are up.

    Without --name, list every testbed here with its fabric and hosts."""
    if name is None:
        _list_testbeds(output)
        return
    rows = build.status(name)
    if not rows:
        known = ", ".join(build.existing()) or "none"
        raise TestbedError(f"no testbed named {name!r} (testbeds here: {known})")
    table = Table("host", "address", "netns", "running", "ssh")
    for row in rows:
        table.add_row(
            row.name, row.mgmt_ip, *("yes" if v else "NO" for v in (row.netns, row.running, row.ssh))
        )
    output.console().print(table)
    output.write({"kind": "testbed-status", "name": name, "hosts": rows})
    down = [r.name for r in rows if not (r.netns and r.running and r.ssh)]
    if down:
        raise TestbedError(f"testbed {name!r}: {', '.join(down)} not up (netns, running, ssh: see the table)")


def _list_testbeds(output: ResultOutput) -> None:
    table = Table("testbed", "fabric", "hosts", "inventory")
    found = []
    for name in build.existing():
        state = build.load_state(name) or {}
        spec = state.get("spec", {})
        found.append({"name": name, "fabric": spec.get("fabric"), "hosts": spec.get("hosts"),
                      "inventory": str(layout.testbed_dir(name) / "inventory.yml")})
        table.add_row(name, str(spec.get("fabric", "?")), str(spec.get("hosts", "?")), found[-1]["inventory"])
    shown = table if table.row_count else "no testbed is up here (run 'fabtune testbed up')"
    output.console().print(shown)
    output.write({"kind": "testbeds", "testbeds": found})


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
def ssh(name: str, host: str, command: tuple[str, ...]) -> None:
    """Open a shell on HOST, or run COMMAND there."""
    argv = ssh_argv(name, host, " ".join(command), tty=not command and sys.stdin.isatty())
    status = subprocess.run(argv, check=False).returncode
    if status:
        raise ExitPassedOn(status)
