"""Options and output helpers shared by the verbs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from fabtune.errors import ConfigError
from fabtune.journal import RUN_ID_RE, Journal


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
JSON_OPTION = click.option(
    "--json", "json_file", type=click.Path(path_type=Path), help="Also write results as JSON."
)
OOB_OPTION = click.option(
    "--oob-interface",
    default=None,
    help="Interface for the launcher's own TCP traffic (mpirun --mca *_if_include).",
)


def require_file(path: Path, what: str) -> Path:
    """Refuse a missing input file with one clear error."""
    if not path.is_file():
        raise ConfigError(what, [f"{path}: no such file"])
    return path


def write_json(path: Path | None, payload: Any) -> None:
    """Write dataclasses (nested) as JSON when a path was given."""
    if path is None:
        return
    path.write_text(json.dumps(_plain(payload), indent=2, sort_keys=True) + "\n")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
