"""Every verb that runs host pairs takes them from the one schedule, for odd host counts too.

The benchmark launches are replaced by recorders: the tests read which rounds each code path hands
to ``fabtune.perf.pairs`` and compare them with :func:`fabtune.perf.schedule.all_pairs_rounds`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fabtune import bootstrap, drift
from fabtune.cli import cli
from fabtune.events import quiet
from fabtune.inventory import InventoryInfo
from fabtune.perf import pairs
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.schedule import Pair, all_pairs_rounds

bench = importlib.import_module("fabtune.commands.bench")  # the package exports the group by this name


class _Stop(Exception):
    """Raised by a recorder once it has what the test reads."""


def _views(n: int, rails: int = 2) -> dict[str, HostView]:
    views = {}
    for i in range(1, n + 1):
        ports = tuple(
            Rail(f"mlx5_{r}", f"eth{2 + r}", f"10.9.{r}.{i}", 4200, 200.0, "Ethernet", 3)
            for r in range(rails)
        )
        views[f"h{i:02d}"] = HostView(f"h{i:02d}", ports, {})
    return views


def _host_rounds(rounds: Sequence[Sequence[Pair]]) -> list[list[tuple[str, str]]]:
    """The host pairs of rail 0, round by round."""
    return [[(p.server, p.client) for p in rnd if p.rail == 0] for rnd in rounds]


def _info(tmp_path: Path, hosts: Sequence[str]) -> InventoryInfo:
    return InventoryInfo(tmp_path / "inv.yml", "rack", "roce", tuple(hosts), (), "mpirun", None)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_bench_pairs_runs_the_schedule_on_any_host_count(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = _views(n)
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all: {}\n")
    seen: list[Sequence[Sequence[Pair]]] = []

    def record(_inv: Path, rounds: Sequence[Sequence[Pair]], *_a: Any, **_k: Any) -> list[list[Any]]:
        seen.append(rounds)
        return [[] for _ in rounds]

    monkeypatch.setattr(bench, "read_hosts", lambda _inv: views)
    monkeypatch.setattr(bench, "read_inventory", lambda _inv: _info(tmp_path, sorted(views)))
    monkeypatch.setattr(pairs, "run_rounds", record)
    result = CliRunner().invoke(cli, ["bench", "pairs", "-i", str(inventory)])
    assert result.exit_code == 0, result.output
    assert _host_rounds(seen[0]) == all_pairs_rounds(sorted(views))
    assert all({p.rail for p in rnd} == {0, 1} for rnd in seen[0])


@pytest.mark.parametrize("n", [3, 4, 5])
def test_bootstrap_matrix_is_the_same_schedule(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = _views(n)
    seen: list[Sequence[Sequence[Pair]]] = []

    def record(_inv: Path, rounds: Sequence[Sequence[Pair]], *_a: Any, **_k: Any) -> list[list[Any]]:
        seen.append(rounds)
        raise _Stop

    monkeypatch.setattr(bootstrap, "read_hosts", lambda _inv: views)
    monkeypatch.setattr(bootstrap, "static_checks", lambda _views: [])
    monkeypatch.setattr(pairs, "run_rounds", record)
    report = bootstrap.BootstrapReport("rack", "p.yml", 0.9, 0.8)
    with pytest.raises(_Stop):
        bootstrap.acceptance(tmp_path / "inv.yml", _info(tmp_path, sorted(views)), report, quiet)
    assert _host_rounds(seen[0]) == all_pairs_rounds(sorted(views))


@pytest.mark.parametrize("n", [3, 4, 5])
def test_drift_round_is_taken_from_the_same_schedule(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = _views(n)
    seen: list[Sequence[Pair]] = []

    def record(_inv: Path, rnd: Sequence[Pair], *_a: Any, **_k: Any) -> list[Any]:
        seen.append(rnd)
        return []

    def stop(*_a: Any, **_k: Any) -> None:
        raise _Stop

    monkeypatch.setattr(pairs, "run_round", record)
    monkeypatch.setattr(drift.nccl, "run", stop)
    with pytest.raises(_Stop):
        drift.measure(tmp_path / "inv.yml", views, _info(tmp_path, sorted(views)))
    schedule = all_pairs_rounds(sorted(views))
    rounds = _host_rounds(seen)
    assert rounds[0] == schedule[0]
    assert all(pair in schedule[1] for pair in [p for rnd in rounds[1:] for p in rnd])
    assert {h for rnd in rounds for pair in rnd for h in pair} == set(views)
