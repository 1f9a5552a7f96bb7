"""Pair scheduling: every pair once, disjoint within a round, N-1 rounds (N for an odd count)."""

from __future__ import annotations

import itertools

import pytest

from fabtune.errors import ConfigError
from fabtune.perf.schedule import (
    all_pairs_rounds,
    covering_rounds,
    idle_hosts,
    incast_stage,
    pair_rounds,
    rail_pairs,
)


@pytest.mark.parametrize("n", [2, 4, 6, 8, 16])
def test_all_pairs_in_n_minus_1_rounds(n: int) -> None:
    hosts = [f"h{i:02d}" for i in range(1, n + 1)]
    rounds = all_pairs_rounds(hosts)
    assert len(rounds) == n - 1
    seen = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, map(frozenset, itertools.combinations(hosts, 2))))
    for r in rounds:
        members = [h for p in r for h in p]
        assert len(members) == len(set(members)) == n


@pytest.mark.parametrize("n", range(2, 10))
def test_every_count_meets_each_pair_once_with_no_host_twice_a_round(n: int) -> None:
    hosts = [f"h{i:02d}" for i in range(1, n + 1)]
    rounds = all_pairs_rounds(hosts)
    assert len(rounds) == (n if n % 2 else n - 1)
    met = [frozenset(p) for r in rounds for p in r]
    assert len(met) == len(set(met))
    assert set(met) == {frozenset(p) for p in itertools.combinations(hosts, 2)}
    for r in rounds:
        members = [h for p in r for h in p]
        assert len(members) == len(set(members)) == n - n % 2
    idle = [h for r in rounds for h in idle_hosts(hosts, r)]
    assert sorted(idle) == (hosts if n % 2 else [])  # an odd count: each host sits out exactly once


def test_too_few_or_duplicate_hosts_are_refused() -> None:
    with pytest.raises(ConfigError, match="hosts: 1 hosts given"):
        all_pairs_rounds(["a"])
    with pytest.raises(ConfigError, match="duplicates"):
        all_pairs_rounds(["a", "b", "a"])


@pytest.mark.parametrize("n", range(2, 10))
def test_covering_rounds_are_the_schedules_own_pairs(n: int) -> None:
    hosts = [f"h{i:02d}" for i in range(1, n + 1)]
    schedule = all_pairs_rounds(hosts)
    cover = covering_rounds(hosts)
    assert cover[0] == schedule[0]
    assert all(pair in schedule[1] for r in cover[1:] for pair in r)
    assert len(cover) == 1 + n % 2 and (n % 2 == 0 or len(cover[1]) == 1)
    assert {h for r in cover for p in r for h in p} == set(hosts)


def test_pair_rounds_is_the_schedule_on_every_rail() -> None:
    hosts = ["a", "b", "c", "d", "e"]
    runs = pair_rounds(hosts, rails=2)
    assert [[(p.server, p.client) for p in r if p.rail == 0] for r in runs] == all_pairs_rounds(hosts)
    assert all({p.rail for p in r} == {0, 1} for r in runs)


def test_rail_pairs_use_distinct_ports_within_a_round() -> None:
    runs = rail_pairs(all_pairs_rounds(["a", "b", "c", "d"]), rails=4)
    for r in runs:
        assert len({(p.server, p.port) for p in r}) == len(r) == 8
        assert {p.rail for p in r} == {0, 1, 2, 3}


def test_incast_stage() -> None:
    stage = incast_stage(["a", "b", "c", "d"], 3)
    assert [(p.server, p.client) for p in stage] == [("a", "b"), ("a", "c"), ("a", "d")]
    assert len({p.port for p in stage}) == 3
    with pytest.raises(ConfigError, match="fan_in: 4"):
        incast_stage(["a", "b", "c", "d"], 4)
