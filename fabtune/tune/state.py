"""Desired state per host: facts in, "current + change" out, and exact comparisons for rollbacks.

A snapshot is a host's fabric facts without the read-only ``hardware``; applying it (couplings off)
restores the host. A move is the same state with the change's knobs replaced. The state itself is
:class:`fabtune.state.HostState`; these functions also take plain trees (tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabtune.knobs import Change
from fabtune.state import MANAGED, HostState

__all__ = ["MANAGED", "HostState", "as_state", "differences", "snapshot_of", "with_change"]


def as_state(state: HostState | Mapping[str, Any]) -> HostState:
    """``state`` as a HostState (a plain tree converted)."""
    return state if isinstance(state, HostState) else HostState.from_tree(state)


def snapshot_of(facts: Mapping[str, Any]) -> HostState:
    """The managed part of one host's facts: what a rollback restores."""
    return HostState.of_facts(facts)


def with_change(current: HostState | Mapping[str, Any], change: Change) -> HostState:
    """``current`` (one host's managed state) with the change's knobs replaced on every RDMA port."""
    return as_state(current).with_change(change)


def differences(expected: HostState | Mapping[str, Any], found: HostState | Mapping[str, Any]) -> list[str]:
    """Every managed knob whose value differs, as ``path: expected -> found``."""
    return as_state(expected).differences(as_state(found))
