"""Make the repository's module_utils importable the way Ansible ships them to a host.

Modules import ``ansible.module_utils.fabric_*``; Ansible resolves that from ``module_utils/``
(ANSIBLE_MODULE_UTILS). Here the same files are registered under those names, and ``library/``
modules are loaded from their files, so the tests run without hosts.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

REPO = Path(__file__).resolve().parents[3]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


for _util in ("fabric_desired", "fabric_host", "fabric_qos_backend", "fabric_apply"):
    _load(f"ansible.module_utils.{_util}", REPO / "module_utils" / f"{_util}.py")


def load_module(name: str) -> ModuleType:
    """A ``library/`` module, imported from its file."""
    return _load(f"fabtune_library_{name}", REPO / "library" / f"{name}.py")


class AnsibleExitJson(Exception):
    """exit_json was called (the module's result is the first argument)."""


class AnsibleFailJson(Exception):
    """fail_json was called."""


def _exit_json(*args: Any, **kwargs: Any) -> None:
    kwargs.setdefault("changed", False)
    raise AnsibleExitJson(kwargs)


def _fail_json(*args: Any, **kwargs: Any) -> None:
    kwargs["failed"] = True
    raise AnsibleFailJson(kwargs)


@pytest.fixture
def module_args(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set a module's arguments (as ansible's own unit tests do) with exit/fail raising."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)

    def setter(args: dict[str, Any], check_mode: bool = False, diff: bool = False) -> None:
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff,
                    _ansible_remote_tmp="/tmp", _ansible_keep_remote_files=False)
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)

    yield setter
