"""The ``fabtune`` command: verbs only. Exceptions become exit codes here and nowhere else."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from rich.console import Console

from fabtune import __version__
from fabtune.commands import COMMANDS
from fabtune.errors import ConfigError, ExitStatus, FabtuneError
from fabtune.paths import private_umask


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fabtune")
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Tune RDMA fabrics (RoCE, InfiniBand) of multi-node GPU clusters."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


for _command in COMMANDS:
    cli.add_command(_command)


def _report(err: FabtuneError, console: Console) -> None:
    if isinstance(err, ConfigError):
        console.print(f"[bold red]error:[/] {err.source} is invalid:", highlight=False)
        for problem in err.problems:
            console.print(f"  - {problem}", highlight=False, markup=False)
        return
    console.print(f"[bold red]error:[/] {err}", highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit status (the one place errors map to codes)."""
    args = list(sys.argv[1:] if argv is None else argv)
    console = Console(stderr=True)
    private_umask()  # the journal, reports, desired states, locks and Ansible artifacts: owner only
    try:
        code = cli.main(args=args, prog_name="fabtune", standalone_mode=False)
    except FabtuneError as err:
        if "--debug" in args:
            raise
        _report(err, console)
        return int(err.code)
    except click.exceptions.Abort:
        console.print("aborted")
        return int(ExitStatus.INTERRUPTED)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as err:
        err.show()
        return int(ExitStatus.USAGE)
    except KeyboardInterrupt:
        console.print("interrupted")
        return int(ExitStatus.INTERRUPTED)
    # A command that ends with ctx.exit(N) returns N here (click's standalone_mode=False).
    return code if isinstance(code, int) else int(ExitStatus.OK)
