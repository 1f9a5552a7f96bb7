"""Make the collection fabtune.fabric importable the way Ansible ships its modules to a host.

Modules import ``ansible_collections.fabtune.fabric.plugins.module_utils.fabric_*``; Ansible
resolves that from the collections path (``fabtune/content/`` of this repository). Here that directory
goes on ``sys.path``, so ``ansible_collections`` (a namespace package: ansible-core ships none of
its own) imports the same files under the same names, and the modules are imported as
``ansible_collections.fabtune.fabric.plugins.modules.<name>``: the tests run without hosts.
"""

from __future__ import annotations

import importlib
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
COLLECTIONS = REPO / "fabtune" / "content"
COLLECTION = "ansible_collections.fabtune.fabric"
MODULE_UTILS = f"{COLLECTION}.plugins.module_utils"

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def load_util(name: str) -> ModuleType:
    """A module_utils file of the collection (``fabric_apply``...), imported by its collection name."""
    module = importlib.import_module(f"{MODULE_UTILS}.{name}")
    assert Path(module.__file__ or "").resolve().is_relative_to(COLLECTIONS), module.__file__
    return module


for _util in ("fabric_desired", "fabric_formats", "fabric_host", "fabric_qos_backend", "fabric_apply"):
    load_util(_util)


def load_module(name: str) -> ModuleType:
    """A module of the collection (``fabric_qos``...), imported by its collection name."""
    module = importlib.import_module(f"{COLLECTION}.plugins.modules.{name}")
    assert Path(module.__file__ or "").resolve().is_relative_to(COLLECTIONS), module.__file__
    return module


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


def module_result(module: ModuleType, module_args: Any, args: dict[str, Any]) -> dict[str, Any]:
    """``module``'s result for ``args`` (``module_args`` is the fixture below): exit or fail."""
    module_args(args)
    with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as done:
        module.main()
    result: dict[str, Any] = done.value.args[0]
    return result


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
