"""A round of pairs over the direct channel (``fabtune.perf.roundchannel``), against an SSH server on
loopback that runs the commands (``tests/unit/shellsshd.py``): the servers are small Python TCP
listeners on free loopback ports, ``ss`` tells when they listen, as it does for perftest without -R.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabtune import sshdirect
from fabtune.perf import roundchannel
from tests.unit.shellsshd import serving

SERVE = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1); "
         "c, _ = s.accept(); print('served', c.recv(16).decode())")
SEND = "import socket, sys; c = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); c.sendall(b'hi')"


@pytest.fixture
def channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sshdirect.Channel]:
    monkeypatch.setenv("FABTUNE_HOME", str(tmp_path / "home"))
    with serving(tmp_path) as served:
        yield sshdirect.Channel(served["targets"], 4)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(port: int, server: list[str], client_port: int | None = None) -> dict[str, Any]:
    ident = f"h01->h01/lo:{port}"
    return {
        "id": ident, "server": "h01", "client": "h01", "port": port, "rdma_cm": False,
        "server_command": {"id": ident, "argv": server, "port": port, "rdma_cm": False},
        "client_command": {"id": ident, "argv": [sys.executable, "-c", SEND, str(client_port or port)]},
    }


READS = {"h01": [{"id": "ethtool lo", "argv": ["echo", "NIC statistics:"]}]}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_servers_listen_before_the_clients_run_and_the_steps_read_as_the_playbooks(
        channel: sshdirect.Channel) -> None:
    port = _free_port()
    run = _run(port, [sys.executable, "-c", SERVE, str(port)])
    outcome = roundchannel.run_round(channel, [run], READS, 30)
    assert outcome.ok, outcome.failures()
    before = outcome.results(roundchannel.BEFORE_TASK)["h01"]
    assert before["runs"][0]["stdout"] == "NIC statistics:\n"
    assert [s["id"] for s in before["started"]] == [f"h01->h01/lo:{port}"] and before["started"][0]["pid"] > 0
    clients = outcome.results(roundchannel.CLIENTS_TASK)["h01"]["runs"]
    assert clients[0]["rc"] == 0 and clients[0]["timed_out"] is False
    after = outcome.results(roundchannel.AFTER_TASK)["h01"]
    assert after["collected"] == [
        {"id": f"h01->h01/lo:{port}", "rc": 0, "stdout": "served hi\n", "stderr": "", "timed_out": False}]
    assert after["runs"][0]["stdout"] == "NIC statistics:\n"


def test_a_server_that_never_listens_fails_the_round_and_is_stopped(
        channel: sshdirect.Channel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(roundchannel, "LISTEN_S", 1)
    port = _free_port()
    unique = f"{50 + port / 1e6:.6f}"  # a sleep no other test runs
    outcome = roundchannel.run_round(channel, [_run(port, ["sleep", unique])], READS, 60)
    assert not outcome.ok
    failed = outcome.failures()[0]
    assert failed.task == roundchannel.BEFORE_TASK
    assert failed.result["msg"] == f"start: h01->h01/lo:{port} did not listen on port {port} within 1 s"
    assert roundchannel.CLIENTS_TASK not in {t.task for t in outcome.tasks}
    started = _pids_of_sleep(unique)
    assert started == [], f"left running: {started}"


def test_a_server_left_waiting_is_stopped_at_collect_and_reported_timed_out(
        channel: sshdirect.Channel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(roundchannel, "COLLECT_S", 0.5)
    port, elsewhere = _free_port(), _free_port()
    with socket.socket() as other:  # the client's port: something listens there, not the server
        other.bind(("127.0.0.1", elsewhere))
        other.listen(1)
        run = _run(port, [sys.executable, "-c", SERVE, str(port)], elsewhere)
        outcome = roundchannel.run_round(channel, [run], READS, 60)
    assert outcome.ok
    pid = outcome.results(roundchannel.BEFORE_TASK)["h01"]["started"][0]["pid"]
    collected = outcome.results(roundchannel.AFTER_TASK)["h01"]["collected"][0]
    assert collected["timed_out"] is True
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)


def _pids_of_sleep(seconds: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[:2] == [b"sleep", seconds.encode()]:
                found.append(int(entry.name))
    return found
