"""The ``fabtune`` command: verbs only. Exceptions become exit codes here and nowhere else."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

import click
from rich.console import Console
from rich.markup import escape

from fabtune import __version__, commands, inventory, plugins
from fabtune.commands import _console
from fabtune.errors import ConfigError, ExitPassedOn, ExitStatus, FabtuneError, Terminated
from fabtune.paths import private_umask


class _Verbs(click.Group):
    """The verbs of fabtune and those of its plugins (fabtune.plugins), each loaded only when asked
    for; a verb added with ``add_command`` comes first, then fabtune's, then the plugins'."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *commands.VERBS, *plugins.commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return (super().get_command(ctx, cmd_name) or commands.load(cmd_name)
                or plugins.commands().get(cmd_name))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The verbs and their one-line help; fabtune's own from ``commands.SUMMARIES`` (no verb's
        module is imported to list it), the others from their commands."""
        summaries: dict[str, str] = {}
        found: dict[str, click.Command] = {}
        for name in self.list_commands(ctx):
            if name in commands.SUMMARIES and name not in self.commands:
                summaries[name] = commands.SUMMARIES[name]
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                found[name] = command
        names = sorted({*summaries, *found})
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(n, _shortened(summaries[n], limit) if n in summaries else found[n].get_short_help_str(limit))
                for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _shortened(text: str, limit: int) -> str:
    """A one-line help cut to ``limit`` characters the way click cuts a command's own."""
    return click.Command("_", help=text).get_short_help_str(limit)


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fabtune")
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
@click.option(
    "-v", "--verbose", count=True,
    help="-v: Ansible's task stream live on stderr (host, task, ok/changed/failed) and each run's "
    "artifacts; -vv: also the command lines run (the benchmarks').",
)
@click.option("-q", "--quiet", is_flag=True, help="Only the result: no progress (errors still on stderr).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int, quiet: bool) -> None:
    """Tune RDMA fabrics (RoCE, InfiniBand) of multi-node GPU clusters."""
    if verbose and quiet:
        raise click.UsageError("-v and -q exclude each other")
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["verbosity"] = -1 if quiet else verbose
    if quiet:
        token = _console.QUIET.set(True)
        ctx.call_on_close(lambda: _console.QUIET.reset(token))
    if verbose:
        from fabtune import ansible
        from fabtune.commands._verbose import AnsibleStream

        ctx.with_resource(ansible.observing(AnsibleStream(verbose)))


def _report(err: FabtuneError, console: Console) -> None:
    if isinstance(err, ConfigError):
        console.print(f"[bold red]error:[/] {err.source} is invalid:", highlight=False)
        for problem in err.problems:
            console.print(f"  - {problem}", highlight=False, markup=False)
        return
    console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)  # "[evidence]" is text


def _terminate(signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during cleanup ends the process
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}")


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While a verb runs, SIGTERM raises Terminated, so its journal and cleanup paths run (as on Ctrl-C)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit status (the one place errors map to codes)."""
    args = list(sys.argv[1:] if argv is None else argv)
    console = Console(stderr=True, soft_wrap=True)  # an error line is never cut: paths stay whole
    private_umask()  # the journal, reports, desired states, locks and Ansible artifacts: owner only
    inventory.read_ahead(args)  # while the verb's modules load
    try:
        with _sigterm_raises():
            return _main(args, console)
    finally:
        inventory.forget_ahead()


def _invoke(args: list[str]) -> None:
    """The verb; a file-system failure (a full disk, a read-only or vanished FABTUNE_HOME) that no
    layer below turned into its own error becomes one that names the file."""
    try:
        cli.main(args=args, prog_name="fabtune", standalone_mode=False)
    except OSError as err:
        where = " -> ".join(str(f) for f in (err.filename, err.filename2) if f) or "a file"
        raise FabtuneError(f"cannot use {where}: {err.strerror or err}") from err


def _failed(err: FabtuneError, debug: bool, console: Console) -> int:
    """The exit status of ``err``, reported on stderr (re-raised with --debug: the traceback)."""
    if isinstance(err, ExitPassedOn):
        return err.status
    if debug:
        raise err
    _report(err, console)
    return int(err.code)


def _main(args: list[str], console: Console) -> int:
    try:
        _invoke(args)
    except FabtuneError as err:
        return _failed(err, "--debug" in args, console)
    except click.exceptions.Abort as err:
        cause = err.__cause__
        console.print(str(cause) if isinstance(cause, Terminated) else "aborted", highlight=False)
        return int(ExitStatus.INTERRUPTED)
    except click.exceptions.Exit as done:  # click's own (--help, --version)
        return int(done.exit_code)
    except click.ClickException as err:
        err.show()
        return int(ExitStatus.USAGE)
    except KeyboardInterrupt as err:
        console.print(str(err) if isinstance(err, Terminated) else "interrupted", highlight=False)
        return int(ExitStatus.INTERRUPTED)
    return int(ExitStatus.OK)  # a verb that returns ends OK: every other status is an exception above
