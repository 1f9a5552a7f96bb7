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
    """Every unordered host pair exactly once, in rounds where no host is in two pairs.

    The one pair schedule of fabtune (``bench pairs``, bootstrap's matrix, drift's round): the
    circle method, which fixes the first host and rotates the others one step per round. An even
    count takes N-1 rounds of N/2 pairs; an odd count takes N rounds of (N-1)/2 pairs, each host
    idle in exactly one of them (the circle of N+1 with an empty seat).

    Raises:
        ConfigError: for fewer than 2 hosts or duplicate names.
    """
    if len(hosts) < 2:
        raise ConfigError("pair schedule", [f"hosts: {len(hosts)} hosts given; a pair needs 2 or more"])
    if len(set(hosts)) != len(hosts):
        raise ConfigError("pair schedule", [f"hosts: {list(hosts)!r} has duplicates"])
    seats: list[str | None] = [*hosts, None] if len(hosts) % 2 else list(hosts)
    ring = seats[1:]
    rounds = []
    for _ in range(len(seats) - 1):
        order = [seats[0], *ring]
        half = len(order) // 2
        met = [(order[i], order[-1 - i]) for i in range(half)]
        rounds.append([(a, b) for a, b in met if a is not None and b is not None])
        ring = ring[-1:] + ring[:-1]
    return rounds


def idle_hosts(hosts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The hosts of ``hosts`` in none of ``pairs`` (one per round of an odd count's schedule)."""
    busy = {h for pair in pairs for h in pair}
    return [h for h in hosts if h not in busy]


def pair_rounds(hosts: Sequence[str], rails: int, base_port: int = 18515) -> list[list[Pair]]:
    """The all-pairs matrix as concurrent rounds of runs: :func:`all_pairs_rounds` on every rail."""
    return rail_pairs(all_pairs_rounds(hosts), rails, base_port)


def covering_rounds(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The first round of :func:`all_pairs_rounds`, and for an odd count the schedule's next pair
    of the host it leaves idle: the fewest runs of the schedule that put every host in a pair."""
    rounds = all_pairs_rounds(hosts)
    first = rounds[0]
    idle = idle_hosts(hosts, first)
    later = [pair for pair in rounds[1] if set(pair) & set(idle)] if idle else []
    return [first, later] if later else [first]


def rail_pairs(
    rounds: Sequence[Sequence[tuple[str, str]]], rails: int, base_port: int = 18515
) -> list[list[Pair]]:
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
