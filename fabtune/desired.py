"""The tuned desired state of a fabric: what a tuning run leaves, and what drift checks against."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from fabtune.paths import check_name, private_dir, under_home, write_private


def tuned_path(fabric: str) -> Path:
    """``$FABTUNE_HOME/desired/<fabric>.yml`` (a profile file: one key, ``fabric_desired``).

    Raises:
        ConfigError: when ``fabric`` is not a valid name.
    """
    return under_home("desired", f"{check_name('fabric name', fabric)}.yml")


def save_tuned(fabric: str, desired: Mapping[str, Any], run_id: str) -> Path:
    """Write the tuned desired state as a profile usable with ``fabtune apply`` and ansible-playbook."""
    path = tuned_path(fabric)
    private_dir(path.parent)
    header = f"# Tuned desired state of fabric {fabric!r}, written by run {run_id} at {time.ctime()}\n"
    return write_private(path, header + yaml.safe_dump({"fabric_desired": dict(desired)}, sort_keys=True))


def load_tuned(fabric: str) -> dict[str, Any] | None:
    """The tuned desired state, or None when no tuning run has written one."""
    path = tuned_path(fabric)
    if not path.exists():
        return None
    doc = yaml.safe_load(path.read_text()) or {}
    desired: dict[str, Any] = doc.get("fabric_desired", {})
    return desired
