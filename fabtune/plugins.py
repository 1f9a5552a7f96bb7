"""Plugins: verbs and a tune oracle that the package's own code does not import.

A plugin is a :class:`Plugin` named by an entry point of the group ``fabtune.plugins`` (in the
``pyproject.toml`` of the distribution that ships it). fabtune's emulated rack is one
(``testbed = "fabtune.testbed.plugin:PLUGIN"``): it adds ``fabtune testbed`` and ``fabtune demo``
and the fabric model's oracle for tune reports on a testbed. A plugin whose module is not
installed is skipped, so fabtune without ``fabtune/sim`` and ``fabtune/testbed`` runs every other
verb, and ``tune`` without an oracle. Plugins load only when the CLI needs them (a verb that is not
its own, the verb list, ``tune``'s report).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import click

from fabtune.inventory import InventoryInfo

GROUP = "fabtune.plugins"

Oracle = Callable[[InventoryInfo], Mapping[str, Any] | None]
"""A fabric's best reachable all_reduce busbw and the tuned rack's (``best_busbw``, ``tuned_busbw``,
``share_of_best``, ``size_bytes``), for the tune report; None for a fabric the plugin does not know."""


@dataclass(frozen=True)
class Plugin:
    """What one plugin adds: top-level verbs, and an oracle for the tune report."""

    commands: tuple[click.Command, ...] = ()
    oracle: Oracle | None = None


def load(points: Iterable[EntryPoint]) -> tuple[Plugin, ...]:
    """The plugins the entry points name, in name order, less those whose module is not installed.

    Raises:
        ModuleNotFoundError: a plugin that is installed imports a module that is not (a broken install).
        TypeError: an entry point names something that is not a :class:`Plugin`.
    """
    found = []
    for point in sorted(points, key=lambda p: p.name):
        try:
            plugin = point.load()
        except ModuleNotFoundError as err:
            if not _is_absent(err, point.module):
                raise
            continue
        if not isinstance(plugin, Plugin):
            raise TypeError(f"entry point {point.group}:{point.name} = {point.value} is not a fabtune Plugin")
        found.append(plugin)
    return tuple(found)


def _is_absent(err: ModuleNotFoundError, module: str) -> bool:
    """Whether ``err`` is about the plugin's own module (or a package above it), not one it imports."""
    parts = module.split(".")
    return err.name in {".".join(parts[: i + 1]) for i in range(len(parts))}


@functools.cache
def installed() -> tuple[Plugin, ...]:
    """The installed plugins (loaded once per process)."""
    return load(entry_points(group=GROUP))


def commands() -> dict[str, click.Command]:
    """Every plugin's verbs by name (the first plugin to name a verb keeps it)."""
    verbs: dict[str, click.Command] = {}
    for plugin in installed():
        for command in plugin.commands:
            if command.name is not None:
                verbs.setdefault(command.name, command)
    return verbs


def oracle(info: InventoryInfo) -> Mapping[str, Any] | None:
    """The first plugin oracle that knows this fabric, or None (no plugin knows it, or none is installed)."""
    for plugin in installed():
        if plugin.oracle is not None and (found := plugin.oracle(info)) is not None:
            return found
    return None
