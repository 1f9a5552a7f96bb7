"""Pair scheduling: every pair once, disjoint within a round, N-1 rounds."""

from __future__ import annotations

import itertools

import pytest

from fabtune.bench.schedule import all_pairs_rounds, incast_stage, rail_pairs
from fabtune.errors import ConfigError


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


def test_odd_host_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="hosts: 3 hosts given"):
        all_pairs_rounds(["a", "b", "c"])


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
