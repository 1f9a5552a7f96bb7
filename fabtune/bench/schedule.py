"""Which hosts talk to which, when: all-pairs rounds and incast stages for ib_write_bw runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fabtune.errors import ConfigError


@dataclass(frozen=True)
class Pair:
    """One ib_write_bw run: ``client`` writes to ``server`` on rail ``rail`` (NIC i to NIC i)."""

    server: str
    client: str
    rail: int
    port: int


def all_pairs_rounds(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every unordered host pair exactly once, in N-1 rounds of N/2 disjoint pairs (N even).

    The circle method: fix the first host, rotate the others one step per round.

    Raises:
        ConfigError: for fewer than 2 hosts, an odd count, or duplicate names.
    """
    if len(hosts) < 2 or len(hosts) % 2:
        raise ConfigError("pair schedule", [f"hosts: {len(hosts)} hosts given; need an even number >= 2"])
    if len(set(hosts)) != len(hosts):
        raise ConfigError("pair schedule", [f"hosts: {list(hosts)!r} has duplicates"])
    ring = list(hosts[1:])
    rounds = []
    for _ in range(len(hosts) - 1):
        order = [hosts[0], *ring]
        half = len(order) // 2
        rounds.append([(order[i], order[-1 - i]) for i in range(half)])
        ring = ring[-1:] + ring[:-1]
    return rounds


def rail_pairs(rounds: list[list[tuple[str, str]]], rails: int, base_port: int = 18515) -> list[list[Pair]]:
    """Expand host pairs into per-rail runs (NIC i to NIC i), each with its own TCP port."""
    expanded = []
    for pairs in rounds:
        runs = []
        for index, (a, b) in enumerate(pairs):
            for rail in range(rails):
                runs.append(Pair(server=a, client=b, rail=rail, port=base_port + index * rails + rail))
        expanded.append(runs)
    return expanded


def incast_stage(hosts: Sequence[str], fan_in: int, rail: int = 0, base_port: int = 18515) -> list[Pair]:
    """``fan_in`` clients writing to one server at once on one rail (k:1 incast).

    Raises:
        ConfigError: when there are not enough hosts for the fan-in.
    """
    if fan_in < 2 or fan_in > len(hosts) - 1:
        raise ConfigError(
            "incast", [f"fan_in: {fan_in} must be from 2 to {len(hosts) - 1} for {len(hosts)} hosts"]
        )
    server, clients = hosts[0], hosts[1 : fan_in + 1]
    return [Pair(server=server, client=c, rail=rail, port=base_port + i) for i, c in enumerate(clients)]
