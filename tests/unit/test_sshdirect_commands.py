"""``sshdirect.run_commands``: several commands per host over one connection, as fabric_run runs them.

The server (``tests/unit/shellsshd.py``) is paramiko's, on loopback, and runs each command it is sent
with ``/bin/sh -c`` in a temporary directory: the commands here only sleep, print and touch files there.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabtune import sshdirect
from tests.unit.shellsshd import serving


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with serving(tmp_path) as served:
        yield served


def _cmd(ident: str, *argv: str) -> dict[str, Any]:
    return {"id": ident, "argv": list(argv)}


def test_commands_run_together_and_report_as_fabric_runs(shell: dict[str, Any]) -> None:
    """The first command waits for a file the second writes: together, both end; one after the
    other, the first would wait out its deadline."""
    wait = "i=0; while [ ! -e b ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; test -e b && echo saw-b"
    done = sshdirect.run_commands(shell["targets"], {"h01": [
        _cmd("a", "sh", "-c", wait), _cmd("b", "sh", "-c", "touch b; echo wrote >&2; exit 3"),
    ]}, forks=2, deadline_s=30)
    runs = done["h01"].runs
    assert done["h01"].error is None
    assert runs[0] == {"id": "a", "rc": 0, "stdout": "saw-b\n", "stderr": "", "timed_out": False}
    assert runs[1] == {"id": "b", "rc": 3, "stdout": "", "stderr": "wrote\n", "timed_out": False}


def test_sequential_commands_each_start_after_the_last_ended(shell: dict[str, Any]) -> None:
    done = sshdirect.run_commands(shell["targets"], {"h01": [
        _cmd("0", "sh", "-c", "sleep 0.3; touch first-done"), _cmd("1", "test", "-e", "first-done"),
    ]}, forks=1, deadline_s=30, sequential=True)
    assert [(r["id"], r["rc"]) for r in done["h01"].runs] == [("0", 0), ("1", 0)]


def test_a_command_past_its_deadline_is_given_up_and_the_next_one_still_runs(shell: dict[str, Any]) -> None:
    done = sshdirect.run_commands(shell["targets"], {"h01": [
        _cmd("0", "sleep", "30"), _cmd("1", "echo", "next"),
    ]}, forks=1, deadline_s=1, sequential=True)
    slow, nxt = done["h01"].runs
    assert slow["timed_out"] is True and slow["rc"] == sshdirect.GIVEN_UP_RC
    assert nxt == {"id": "1", "rc": 0, "stdout": "next\n", "stderr": "", "timed_out": False}


def test_the_prefix_goes_first_and_words_are_never_split_or_run_by_the_shell(shell: dict[str, Any]) -> None:
    done = sshdirect.run_commands(shell["targets"], {"h01": [
        _cmd("0", "printf", "%s|", "a b", "x; touch injected", "$(touch injected)"),
    ]}, forks=1, deadline_s=30, prefix=["env", "FABTUNE_X=1"])
    assert done["h01"].runs[0]["stdout"] == "a b|x; touch injected|$(touch injected)|"
    assert not (shell["work"] / "injected").exists()


def test_output_past_the_limit_is_cut(shell: dict[str, Any]) -> None:
    done = sshdirect.run_commands(shell["targets"], {"h01": [_cmd("0", "head", "-c", "5000", "/dev/zero")]},
                                  forks=1, deadline_s=30, max_output=1000)
    assert len(done["h01"].runs[0]["stdout"]) == 1000


def test_a_host_that_does_not_answer_has_no_runs_and_says_why() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    t = sshdirect.target("h09", {"ansible_host": "127.0.0.1", "ansible_port": port})
    done = sshdirect.run_commands({"h09": t}, {"h09": [_cmd("0", "true")]}, forks=1, deadline_s=5,
                                  connect_timeout_s=2)
    assert done["h09"].runs == () and "cannot connect to" in str(done["h09"].error)


def test_a_connection_lost_part_way_keeps_what_ran_and_says_so(shell: dict[str, Any]) -> None:
    def cut() -> None:
        for transport in list(shell["transports"]):
            transport.close()

    timer = threading.Timer(1.0, cut)
    timer.start()
    try:
        done = sshdirect.run_commands(shell["targets"], {"h01": [
            _cmd("0", "echo", "first"), _cmd("1", "sleep", "30"), _cmd("2", "echo", "never"),
        ]}, forks=1, deadline_s=20, sequential=True)
    finally:
        timer.cancel()
    assert [r["id"] for r in done["h01"].runs] == ["0", "1"]
    assert done["h01"].runs[0]["stdout"] == "first\n"
    assert "was lost" in str(done["h01"].error)
