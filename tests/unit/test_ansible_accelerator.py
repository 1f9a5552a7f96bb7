"""FABTUNE_ACCELERATOR: mitogen's strategy for every run when asked for, one clear error otherwise."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from fabtune import ansible
from fabtune.errors import ConfigError


def test_no_accelerator_leaves_ansible_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ansible.ACCELERATOR_ENV, raising=False)
    assert ansible.accelerator_env() == {}
    assert "ANSIBLE_STRATEGY" not in ansible._envvars()
    monkeypatch.setenv(ansible.ACCELERATOR_ENV, "none")
    assert ansible.accelerator_env() == {}


def test_mitogen_sets_its_strategy_plugins_and_strategy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = types.ModuleType("ansible_mitogen")
    fake.__file__ = str(tmp_path / "ansible_mitogen" / "__init__.py")
    monkeypatch.setitem(sys.modules, "ansible_mitogen", fake)
    monkeypatch.setenv(ansible.ACCELERATOR_ENV, "mitogen")
    found = ansible._envvars()
    assert found["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert found["ANSIBLE_STRATEGY_PLUGINS"] == str(tmp_path / "ansible_mitogen" / "plugins" / "strategy")


def test_mitogen_not_installed_is_one_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import raises ImportError
    monkeypatch.setenv(ansible.ACCELERATOR_ENV, "mitogen")
    with pytest.raises(ConfigError) as err:
        ansible.accelerator_env()
    assert err.value.problems == ["'mitogen' needs the mitogen extra: pip install 'fabtune[mitogen]'"]
    assert ansible.ACCELERATOR_ENV in str(err.value)


def test_an_unknown_accelerator_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ansible.ACCELERATOR_ENV, "turbo")
    with pytest.raises(ConfigError) as err:
        ansible.accelerator_env()
    assert err.value.problems == ["'turbo' is not an accelerator (known: none, mitogen)"]


def test_mitogen_detects_a_silent_host_as_fast_as_fabtunes_ssh_keepalives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """mitogen puts its own ServerAlive options (30 s x 10 by default) before ssh_args, where ssh takes
    the first: the runs pass its keepalive variables with fabtune's values instead."""
    monkeypatch.delenv(ansible.ACCELERATOR_ENV, raising=False)
    assert ansible.accelerator_vars() == {}
    fake = types.ModuleType("ansible_mitogen")
    fake.__file__ = str(tmp_path / "ansible_mitogen" / "__init__.py")
    monkeypatch.setitem(sys.modules, "ansible_mitogen", fake)
    monkeypatch.setenv(ansible.ACCELERATOR_ENV, "mitogen")
    found = ansible.accelerator_vars()
    assert found == {"mitogen_ssh_keepalive_interval": 10, "mitogen_ssh_keepalive_count": 3}
    assert "-o ServerAliveInterval=10 -o ServerAliveCountMax=3" in ansible.SSH_ARGS
