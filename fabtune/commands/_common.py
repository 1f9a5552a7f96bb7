"""Options and output helpers shared by the verbs."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from fabtune.commands import _console
from fabtune.errors import ConfigError
from fabtune.journal import RUN_ID_RE, Journal
from fabtune.state import HostState

if TYPE_CHECKING:
    from fabtune.advise.gate import Goal


def absolute_path(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """Click callback: the path made absolute against the current directory, before it goes anywhere
    (ansible-runner takes a relative inventory path for inline inventory text)."""
    return None if value is None else value.absolute()


def run_id_of(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Click callback: a run id, or any unique start of one, made whole. A whole id is taken as it
    is, without opening the journal (a rollback from the hosts' records works with none)."""
    if value is None or RUN_ID_RE.match(value):
        return value
    return Journal().resolve(value)


RUN_ID_ARGUMENT = click.argument("run_id", callback=run_id_of)


INVENTORY_OPTION = click.option(
    "-i",
    "--inventory",
    "inventory",
    required=True,
    type=click.Path(path_type=Path),
    callback=absolute_path,
    help="Ansible inventory (e.g. the path 'fabtune testbed inventory' prints).",
)
OOB_OPTION = click.option(
    "--oob-interface",
    default=None,
    help="Interface for the launcher's own TCP traffic (mpirun --mca *_if_include).",
)


MODEL_OPTION = click.option(
    "--model", "job_spec", type=click.Path(path_type=Path), default=None, callback=absolute_path,
    help="A training job spec (docs/advisor.md): its predicted MFU at --nodes is reported.",
)
NODES_OPTION = click.option(
    "--nodes", "target_nodes", type=click.IntRange(1, 1 << 20), default=None,
    help="The target cluster size for --model (default: the rack's own size).",
)


def job_goal(job_spec: Path | None, nodes: int | None, min_mfu: float | None = None) -> Goal | None:
    """``--model``, ``--nodes`` (and ``--min-mfu``) as a goal: the spec read and checked here, its fit
    to the target size by the run, against the rack's size, before anything runs."""
    if (min_mfu is not None or nodes is not None) and job_spec is None:
        flags = "--min-mfu and --nodes need" if min_mfu is not None else "--nodes needs"
        raise click.UsageError(f"{flags} --model (the job spec)")
    if job_spec is None:
        return None
    from fabtune.advise.gate import Goal  # the advisor's model, only for a verb given --model
    from fabtune.advise.job import load_job

    return Goal(load_job(require_file(job_spec, "--model")), nodes, min_mfu)


def require_file(path: Path, what: str) -> Path:
    """Refuse a missing input file with one clear error."""
    if not path.is_file():
        raise ConfigError(what, [f"{path}: no such file"])
    return path


F = TypeVar("F", bound=Callable[..., Any])
STDOUT = "-"


@dataclass(frozen=True)
class ResultOutput:
    """Where a verb's result goes: the one output convention of every verb that prints a result.

    ``--json`` writes the JSON document to stdout and nothing else goes there (the table a person
    reads is left out; progress stays on stderr). ``-o FILE`` / ``--output FILE`` writes the
    document to FILE and the table to stdout as usual; ``-o -`` is stdout, as ``--json``.
    """

    path: Path | None = None
    to_stdout: bool = False

    @property
    def wanted(self) -> bool:
        return self.to_stdout or self.path is not None

    def console(self) -> Console:
        """The console for the human result: stdout, or nothing when the JSON owns stdout."""
        return Console(quiet=True) if self.to_stdout else _console.out()

    def echo(self, text: str) -> None:
        """A line of the human result (click.echo), left out when the JSON owns stdout."""
        if not self.to_stdout:
            click.echo(text)

    def write(self, payload: Any) -> None:
        """Write the JSON document (dataclasses nested) where it was asked for, if it was."""
        if not self.wanted:
            return
        text = json.dumps(_plain(payload), indent=2, sort_keys=True) + "\n"
        if self.to_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()
        if self.path is not None:
            self.path.write_text(text)


def _legacy_json(value: str | None) -> bool:
    """--json (optionally ``--json -``): True; the retired ``--json PATH`` form gets one clear error."""
    if value is None:
        return False
    if value != STDOUT:
        raise click.BadParameter(
            f"{value!r}: --json no longer takes a file; --json prints the JSON on stdout, "
            f"-o {value} writes it to {value}",
            param_hint="'--json'",
        )
    return True


def result_output(legacy: bool = False) -> Callable[[F], F]:
    """The ``--json`` and ``-o/--output FILE`` options, passed to the verb as ``output`` (a
    :class:`ResultOutput`).

    ``legacy``: the verb used to take ``--json PATH`` (check, bench, bootstrap, drift) and has no
    positional argument: ``--json`` accepts an optional value there, ``-`` only, and any other
    value is refused with the option to use instead, rather than read as a stray argument.
    """

    def decorate(f: F) -> F:
        json_help = "Print the result as JSON on stdout (nothing else goes to stdout)."
        if legacy:
            json_opt = click.option(
                "--json", "json_", is_flag=False, flag_value=STDOUT, default=None, metavar="",
                help=json_help,
            )
        else:
            json_opt = click.option("--json", "json_", is_flag=True, default=False, help=json_help)
        out_opt = click.option(
            "-o", "--output", "output_path", default=None, metavar="FILE",
            type=click.Path(dir_okay=False, allow_dash=True, path_type=str),
            help="Write the result as JSON to FILE ('-': stdout, as --json).",
        )

        def wrapper(*args: Any, json_: Any, output_path: str | None, **kwargs: Any) -> Any:
            to_stdout = _legacy_json(json_) if legacy else bool(json_)
            path = None
            if output_path == STDOUT:
                to_stdout = True
            elif output_path is not None:
                path = Path(output_path).absolute()
            return f(*args, output=ResultOutput(path, to_stdout), **kwargs)

        wrapped = functools.update_wrapper(wrapper, f)
        return out_opt(json_opt(wrapped))  # type: ignore[return-value]

    return decorate


def _plain(value: Any) -> Any:
    """``value`` as JSON can write it: a host's state as its tree, dataclasses as their fields, any
    mapping (a frozen one too) as a dict, tuples as lists."""
    if isinstance(value, HostState):
        return value.tree()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
