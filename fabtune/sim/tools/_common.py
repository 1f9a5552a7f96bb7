"""Helpers shared by the emulated tools: output streams and the node state to act on."""

from __future__ import annotations

import sys

from fabtune.sim.node import NodeState


def out(text: str = "") -> None:
    """Print one line to stdout (the current ``sys.stdout``, so test capture works)."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    """Print one line to stderr."""
    sys.stderr.write(text + "\n")


def state_or_host(state: NodeState | None) -> NodeState:
    """The injected state, or the state of the host the tool runs in."""
    return state if state is not None else NodeState.inside_host()
