"""Fabric profiles: a YAML file holding ``fabric_desired`` (the desired state every fabric role takes).

The schema and the couplings live once, in the module_utils ``fabric_desired.py`` of the in-repo
collection ``fabtune.fabric``: the hosts run the same code (module ``fabtune.fabric.fabric_validate``),
so the controller and the hosts can never disagree on what is valid. Here it is loaded from the
collection's ``plugins/module_utils`` directory (``fabtune.ansible.MODULE_UTILS``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from fabtune.ansible import MODULE_UTILS
from fabtune.errors import ConfigError

PROFILE_KEYS = ("fabric_desired",)


@cache
def desired_schema() -> ModuleType:
    """The shared schema module (the collection's ``plugins/module_utils/fabric_desired.py``)."""
    path = MODULE_UTILS / "fabric_desired.py"
    spec = importlib.util.spec_from_file_location("fabtune_fabric_desired", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with fabtune
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Profile:
    """A validated profile: the raw desired tree (what the hosts get) and its normal form."""

    path: Path
    desired: Mapping[str, Any] = field(repr=False)
    normal: Mapping[str, Any] = field(repr=False)


def validate_desired(desired: object, enforce_couplings: bool = True) -> tuple[list[str], dict[str, Any]]:
    """Every problem of a desired state (field and value named) and its normal form."""
    problems, normal = desired_schema().validate(desired, None, (), enforce_couplings)
    return list(problems), dict(normal)


def load_profile(path: Path) -> Profile:
    """Load and validate a profile file.

    Args:
        path: a YAML file with one key, ``fabric_desired``.

    Returns:
        The validated profile.

    Raises:
        ConfigError: the file cannot be read or parsed, or the desired state is invalid
            (every problem, each naming the field and its value).
    """
    source = f"profile {path}"
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(source, [f"cannot read: {err.strerror}"]) from err
    except yaml.YAMLError as err:
        raise ConfigError(source, [f"not valid YAML: {err}"]) from err
    if not isinstance(doc, dict) or "fabric_desired" not in doc:
        raise ConfigError(source, ["must be a mapping with the key fabric_desired"])
    unknown = [f"{key}: is not a known key (fabric_desired)" for key in doc if key not in PROFILE_KEYS]
    problems, normal = validate_desired(doc["fabric_desired"])
    if unknown or problems:
        raise ConfigError(source, unknown + [f"fabric_desired.{p}" for p in problems])
    return Profile(path, doc["fabric_desired"], normal)
