"""Desired state per host: facts in, "current + change" out, and exact comparisons for rollbacks.

A snapshot is a host's fabric facts without the read-only ``hardware``; applying it (couplings off)
restores the host. A move is the same tree with the change's knobs replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fabtune.knobs import Change

MANAGED = ("nics", "nccl", "sm")


def snapshot_of(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The managed part of one host's facts: what a rollback restores."""
    return {k: copy.deepcopy(facts.get(k)) for k in MANAGED if k in facts}


def with_change(current: Mapping[str, Any], change: Change) -> dict[str, Any]:
    """``current`` (one host's managed state) with the change's knobs replaced on every RDMA port."""
    desired = copy.deepcopy(dict(current))
    nics = desired.get("nics") or {}
    desired["nics"] = {dev: {**knobs, **copy.deepcopy(dict(change.nic))} for dev, knobs in nics.items()}
    if change.nccl:
        desired["nccl"] = {**(desired.get("nccl") or {}), **dict(change.nccl)}
    if change.sm:
        desired["sm"] = {**(desired.get("sm") or {}), **dict(change.sm)}
    return desired


def differences(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """Every managed knob whose value differs, as ``path: expected -> found``."""
    out: list[str] = []
    _diff("", _plain(expected), _plain(found), out)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _diff(f"{path}.{key}" if path else key, a.get(key), b.get(key), out)
    elif a != b and str(a) != str(b):
        out.append(f"{path}: {a!r} -> {b!r}")
