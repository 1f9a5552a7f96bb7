"""Plugins (fabtune.plugins): found through entry points, skipped when absent, never shadowing a
verb of fabtune's own; the emulated rack is one."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import click
import pytest

from fabtune import plugins
from fabtune.cli import cli, main
from fabtune.errors import ExitStatus, FabtuneError
from fabtune.inventory import InventoryInfo
from fabtune.testbed import oracle as testbed_model
from fabtune.tune import run as tune_run

INFO = InventoryInfo(Path("/inv.yml"), "rack1", "roce", ("h01",), (), "mpirun", None)


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=plugins.GROUP)


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_emulated_rack_is_an_installed_plugin() -> None:
    (plugin,) = plugins.installed()  # missing: reinstall (pip install -e .), the entry point is metadata
    assert sorted(c.name or "" for c in plugin.commands) == ["demo", "testbed"]
    assert plugin.oracle is testbed_model.testbed_oracle
    assert main(["demo", "--help"]) == 0


def test_a_plugin_that_is_not_installed_is_skipped() -> None:
    assert plugins.load([_point("gone", "fabtune_no_such_plugin.sub:PLUGIN")]) == ()


def test_an_installed_plugin_that_cannot_import_what_it_needs_is_an_error(modules: Path) -> None:
    (modules / "ft_broken_plugin.py").write_text("import ft_no_such_dependency\n")
    with pytest.raises(ModuleNotFoundError, match="ft_no_such_dependency"):
        plugins.load([_point("broken", "ft_broken_plugin:PLUGIN")])


def test_an_entry_point_that_is_no_plugin_is_an_error(modules: Path) -> None:
    (modules / "ft_not_a_plugin.py").write_text("PLUGIN = 42\n")
    with pytest.raises(TypeError, match="ft_not_a_plugin:PLUGIN is not a fabtune Plugin"):
        plugins.load([_point("odd", "ft_not_a_plugin:PLUGIN")])


def test_plugins_load_in_name_order(modules: Path) -> None:
    for name in ("ft_plugin_b", "ft_plugin_a"):
        (modules / f"{name}.py").write_text(
            f"import click\nfrom fabtune.plugins import Plugin\n"
            f"PLUGIN = Plugin(commands=(click.Command({name!r}),))\n"
        )
    found = plugins.load([_point("b", "ft_plugin_b:PLUGIN"), _point("a", "ft_plugin_a:PLUGIN")])
    assert [p.commands[0].name for p in found] == ["ft_plugin_a", "ft_plugin_b"]


def _oracle(answer: Mapping[str, Any] | None) -> plugins.Oracle:
    return lambda _info: answer


def test_the_oracle_is_the_first_plugin_answer_for_the_fabric(monkeypatch: pytest.MonkeyPatch) -> None:
    found = (plugins.Plugin(), plugins.Plugin(oracle=_oracle(None)),
             plugins.Plugin(oracle=_oracle({"share_of_best": 0.5})), plugins.Plugin(oracle=_oracle({})))
    monkeypatch.setattr(plugins, "installed", lambda: found)
    assert plugins.oracle(INFO) == {"share_of_best": 0.5}
    monkeypatch.setattr(plugins, "installed", lambda: found[:2])
    assert plugins.oracle(INFO) is None


def test_a_plugin_verb_never_shadows_a_verb_of_fabtune(monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = click.Command("tune", help="not fabtune's tune")
    extra = click.Command("extra")
    monkeypatch.setattr(plugins, "installed", lambda: (plugins.Plugin(commands=(impostor, extra)),))
    ctx = click.Context(cli)
    assert cli.get_command(ctx, "tune") is not impostor
    assert cli.get_command(ctx, "extra") is extra
    names = cli.list_commands(ctx)
    assert names == sorted(names) and names.count("tune") == 1 and "extra" in names


def test_fabtune_tune_reports_with_the_plugins_oracle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The verb knows no emulator: it hands the run whatever oracle the installed plugins give."""
    given: dict[str, Any] = {}

    def fake_tune(*_args: Any, **kwargs: Any) -> None:
        given.update(kwargs)
        raise FabtuneError("stop here")

    monkeypatch.setattr(tune_run, "tune", fake_tune)
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {}\n")
    assert main(["tune", "-i", str(inventory)]) == ExitStatus.ERROR
    assert given["oracle"] is plugins.oracle
