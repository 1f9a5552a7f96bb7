"""The in-repo Ansible collection ``fabtune.fabric``: where it lies, and its module_utils on the controller.

Everything Ansible runs ships inside this package (package data of the wheel): the collection with
its modules, roles, playbooks and example profiles, found from wherever fabtune is installed, never
from the working directory. Some of its module_utils are shared by the hosts and the controller (the
desired-state schema ``fabric_desired``, the tool-output parsers ``fabric_formats``): the controller
loads those very files with :func:`module_util`, so the two sides never disagree. This module imports
only the standard library (the emulator's daemons use it too, without ansible-runner).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

CONTENT_ROOT = Path(__file__).resolve().parent / "content"
COLLECTIONS = CONTENT_ROOT
COLLECTION = COLLECTIONS / "ansible_collections" / "fabtune" / "fabric"
PLAYBOOKS = COLLECTION / "playbooks"
ROLES = COLLECTION / "roles"
PROFILES = COLLECTION / "profiles"
MODULE_UTILS = COLLECTION / "plugins" / "module_utils"

_UTIL_NAME = re.compile(r"fabric_[a-z_]{1,40}")
"""A module_utils file's name (``fabric_desired``): what may become a path under MODULE_UTILS."""


@cache
def module_util(name: str) -> ModuleType:
    """The collection's ``plugins/module_utils/NAME.py``, loaded once (as ``fabtune_NAME``).

    Only self-contained files load this way: a module_util that imports another by its collection
    name (``ansible_collections.fabtune.fabric...``) needs Ansible's loader.

    Raises:
        ValueError: when ``name`` is not a module_utils name.
        ImportError: when the file is missing.
    """
    if not _UTIL_NAME.fullmatch(name):
        raise ValueError(f"not a module_utils name: {name!r}")
    path = MODULE_UTILS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"fabtune_{name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look a class's module up by name
    spec.loader.exec_module(module)
    return module
