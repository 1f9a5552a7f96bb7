"""bench_ib_write_bw.yml waits for -R servers with ``rdma resource show cm_id``, for the others with ss.

A perftest server with -R opens no TCP socket (its control exchange goes through rdma_cm), so ss
never shows it: fabric_run's start waits for the listening cm_id instead. The check is the module's
own function, run against what the emulated ``rdma`` prints for a live listener.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune.ansible import PLAYBOOKS
from fabtune.perf import pairs
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.schedule import Pair
from fabtune.sim.node import NodeState
from fabtune.sim.tools import _rdma_cm, rdma
from fabtune.tune import pairs as tune_pairs
from tests.unit.modules.conftest import load_module
from tests.unit.sim_bench.conftest import make_rack

fabric_run = load_module("fabric_run")


def _task(name: str) -> dict[str, Any]:
    plays = yaml.safe_load((PLAYBOOKS / "bench_ib_write_bw.yml").read_text())
    tasks = [t for p in plays for t in p["tasks"] for t in (t.get("block") or [t])]
    return next(t for t in tasks if t["name"] == name)


def _listening(port: int, stdout: str) -> bool:
    return bool(fabric_run.listening_cm_id(stdout, port))


@pytest.fixture
def rack() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="ftq", dir="/tmp"))  # a short path for the Unix socket
    make_rack(base)
    yield base
    shutil.rmtree(base)


def test_the_servers_start_with_their_port_and_whether_they_listen_through_rdma_cm() -> None:
    """The playbook hands fabric_run each server's command as built by fabtune.perf.pairs (with its
    port and rdma_cm), under the round's coreutils timeout, and waits a bounded time for it."""
    start = _task(pairs.BEFORE_TASK)["fabtune.fabric.fabric_run"]
    assert start["start"] == "{{ __fabtune_servers | map(attribute='server_command') | list }}"
    assert start["start_prefix"] == "{{ __fabtune_timeout }}" and start["listen_s"] == 30


def test_the_wait_ends_on_the_listening_cm_id_of_its_port(
    rack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = NodeState.under(rack / "h02")
    assert rdma.main(["-j", "resource", "show", "cm_id"], state, rack / "fabric") == 0
    empty = capsys.readouterr().out
    assert not _listening(18516, empty)
    with _rdma_cm.listen(rack / "fabric", "h02", 18516, ["10.78.1.12"], state.rdma_devices()):
        assert rdma.main(["-j", "resource", "show", "cm_id"], state, rack / "fabric") == 0
        listening = capsys.readouterr().out
    assert _listening(18516, listening)
    assert not _listening(18517, listening)  # another port
    assert not _listening(185160, listening)
    assert not _listening(1851, listening)
    assert not _listening(18516, "rdma: not json")
    other_state = [dict(row, state="CONNECT") for row in json.loads(listening)]
    assert not _listening(18516, json.dumps(other_state))


def test_a_pair_run_says_whether_its_server_listens_through_rdma_cm() -> None:
    rail = Rail("mlx5_1", "eth3", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    views = {h: HostView(h, (rail, rail), {}) for h in ("h01", "h02")}
    pair = Pair("h01", "h02", 1, 18516)
    cm_run = pairs._run_spec(pair, views, tune_pairs.OPTIONS)
    assert cm_run["rdma_cm"] is True and "-R" in cm_run["server_argv"]
    assert cm_run["server_command"] == {"id": cm_run["id"], "argv": cm_run["server_argv"], "port": 18516,
                                        "rdma_cm": True}
    tcp_run = pairs._run_spec(pair, views, PerftestOptions())
    assert tcp_run["rdma_cm"] is False and "-R" not in tcp_run["server_argv"]
    assert tcp_run["server_command"]["rdma_cm"] is False
