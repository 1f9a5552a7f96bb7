"""Desired state per host: facts in, "current + change" out, and exact comparisons for rollbacks.

A snapshot is a host's fabric facts without the read-only ``hardware``; applying it (couplings off)
restores the host. A move is the same tree with the change's knobs replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fabtune.knobs import Change, LosslessClass, View

MANAGED = ("nics", "nccl", "sm")
DISTANCE_ORDER = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")


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


def _distance(facts: Mapping[str, Any]) -> str:
    topo = (facts.get("hardware") or {}).get("topology") or {}
    matrix, legend = topo.get("matrix") or {}, topo.get("nic_legend") or {}
    worst = "PIX"
    for row, cells in matrix.items():
        if not row.startswith("GPU"):
            continue
        gpu = int(row[3:])
        nic = next((n for n, dev in legend.items() if dev == f"mlx5_{gpu % max(len(legend), 1)}"), None)
        cell = cells.get(nic, "PIX") if nic else "PIX"
        if cell in DISTANCE_ORDER and DISTANCE_ORDER.index(cell) > DISTANCE_ORDER.index(worst):
            worst = cell
    return worst


def view_of(
    facts: Mapping[str, Mapping[str, Any]], fabric: str, lossless: LosslessClass | None = None,
    sm_flavor: str | None = None,
) -> View:
    """What the planner needs: the first host's NIC and NCCL state, the GID index, the worst affinity,
    and the lossless class the fabric declares (the inventory's ``fabtune_lossless``)."""
    first = facts[sorted(facts)[0]]
    nics = first.get("nics") or {}
    nic = nics[sorted(nics)[0]] if nics else {}
    ports = (first.get("hardware") or {}).get("ports") or []
    gid = ports[0].get("roce_v2_gid_index") if ports else None
    worst = max((_distance(f) for f in facts.values()), key=DISTANCE_ORDER.index)
    return View(
        fabric="ib" if fabric == "ib" else "roce",
        nic=nic,
        nccl=first.get("nccl") or {},
        sm=first.get("sm") or {},
        rocev2_gid_index=gid,
        hosts=len(facts),
        gpu_nic_distance=worst,
        lossless=lossless,
        sm_flavor=sm_flavor or str((first.get("sm") or {}).get("sm_flavor") or "upstream"),
    )
