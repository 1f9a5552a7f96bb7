"""Traffic patterns for :func:`fabtune.sim.model.p2p`: pair-matrix rounds and k:1 incast."""

from __future__ import annotations

import dataclasses

from fabtune.sim.model.config import Flow


def pair_rounds(hosts: int, template: Flow) -> list[list[Flow]]:
    """Return a round-robin pair matrix: every host pair once, disjoint pairs per round.

    Args:
        hosts: number of hosts.
        template: a flow whose size, QPs, ToS, GID and NICs every generated flow copies.

    Returns:
        ``hosts - 1`` rounds (``hosts`` if odd) of concurrent flows (circle method).
    """
    ring = list(range(hosts)) + ([-1] if hosts % 2 else [])
    m, rounds = len(ring), []
    for _ in range(m - 1):
        pairs = [(ring[i], ring[m - 1 - i]) for i in range(m // 2)]
        rounds.append(
            [dataclasses.replace(template, src_host=a, dst_host=b) for a, b in pairs if -1 not in (a, b)]
        )
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def incast(senders: list[int], receiver: int, template: Flow) -> list[Flow]:
    """Return a k:1 incast: every sender writes to ``receiver`` at the same time."""
    return [dataclasses.replace(template, src_host=s, dst_host=receiver) for s in senders]
