"""bench_ib_write_bw.yml waits for -R servers with ``rdma resource show cm_id``, for the others with ss.

A perftest server with -R opens no TCP socket (its control exchange goes through rdma_cm), so ss
never shows it: the wait reads the listening cm_id instead. The condition is evaluated by Ansible's
own templar against what the emulated ``rdma`` prints for a live listener.
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
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from fabtune.ansible import PLAYBOOKS
from fabtune.perf import pairs
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import HostView, Rail
from fabtune.perf.schedule import Pair
from fabtune.sim.node import NodeState
from fabtune.sim.tools import _rdma_cm, rdma
from fabtune.tune import pairs as tune_pairs
from tests.unit.sim_bench.conftest import make_rack


def _task(name: str) -> dict[str, Any]:
    plays = yaml.safe_load((PLAYBOOKS / "bench_ib_write_bw.yml").read_text())
    tasks = [t for p in plays for t in p["tasks"] for t in (t.get("block") or [t])]
    return next(t for t in tasks if t["name"] == name)


def _listening(port: int, rc: int, stdout: str) -> bool:
    task = _task("Wait for rdma_cm servers to listen")
    templar = Templar(loader=DataLoader(), variables={
        "item": {"port": port}, "__fabtune_cm_listen": {"rc": rc, "stdout": stdout}})
    return bool(templar.evaluate_conditional(trust_as_template(task["until"])))


@pytest.fixture
def rack() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="ftq", dir="/tmp"))  # a short path for the Unix socket
    make_rack(base)
    yield base
    shutil.rmtree(base)


def test_rdma_cm_servers_are_waited_for_with_rdma_and_the_others_with_ss() -> None:
    cm_wait, ss_wait = _task("Wait for rdma_cm servers to listen"), _task("Wait for servers to listen")
    assert cm_wait["ansible.builtin.command"]["argv"] == ["rdma", "-j", "resource", "show", "cm_id"]
    assert ss_wait["ansible.builtin.command"]["argv"][0] == "ss"
    assert cm_wait["when"] == "item.rdma_cm | default(false) | bool"
    assert ss_wait["when"] == "not (item.rdma_cm | default(false) | bool)"
    for task in (cm_wait, ss_wait):  # the same deadline: 30 tries a second apart, each one bounded
        assert task["retries"] == 30 and task["delay"] == 1 and task["timeout"] == 60


def test_the_wait_ends_on_the_listening_cm_id_of_its_port(
    rack: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = NodeState.under(rack / "h02")
    assert rdma.main(["-j", "resource", "show", "cm_id"], state, rack / "fabric") == 0
    empty = capsys.readouterr().out
    assert not _listening(18516, 0, empty)
    with _rdma_cm.listen(rack / "fabric", "h02", 18516, ["10.78.1.12"], state.rdma_devices()):
        assert rdma.main(["-j", "resource", "show", "cm_id"], state, rack / "fabric") == 0
        listening = capsys.readouterr().out
    assert _listening(18516, 0, listening)
    assert not _listening(18517, 0, listening)  # another port
    assert not _listening(185160, 0, listening)
    assert not _listening(18516, 1, listening)  # rdma failed
    other_state = [dict(row, state="CONNECT") for row in json.loads(listening)]
    assert not _listening(18516, 0, json.dumps(other_state))


def test_a_pair_run_says_whether_its_server_listens_through_rdma_cm() -> None:
    rail = Rail("mlx5_1", "eth3", "10.0.0.1", 4200, 400.0, "Ethernet", 3)
    views = {h: HostView(h, (rail, rail), {}) for h in ("h01", "h02")}
    pair = Pair("h01", "h02", 1, 18516)
    cm_run = pairs._run_spec(pair, views, tune_pairs.OPTIONS)
    assert cm_run["rdma_cm"] is True and "-R" in cm_run["server_argv"]
    tcp_run = pairs._run_spec(pair, views, PerftestOptions())
    assert tcp_run["rdma_cm"] is False and "-R" not in tcp_run["server_argv"]
