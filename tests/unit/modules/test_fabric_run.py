"""fabric_run: a host's commands start together, each ends or is stopped at its deadline."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.modules.conftest import COLLECTIONS, load_module, module_result

run = load_module("fabric_run")


def _main(module_args: Any, args: dict[str, Any]) -> dict[str, Any]:
    return module_result(run, module_args, args)


def test_every_command_runs_and_reports_its_status_and_output(module_args: Any) -> None:
    result = _main(module_args, {"commands": [
        {"id": "a", "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]},
        {"id": "b", "argv": ["echo", "second"]},
    ], "deadline_s": 30})
    assert not result["changed"]
    assert result["runs"] == [
        {"id": "a", "rc": 3, "stdout": "out\n", "stderr": "err\n", "timed_out": False},
        {"id": "b", "rc": 0, "stdout": "second\n", "stderr": "", "timed_out": False},
    ]


def test_the_commands_start_together_not_one_after_another(module_args: Any) -> None:
    """Three 3-second sleeps that each print when they started: one after another they would start
    3 s apart; together, within a fraction of that even on a loaded machine."""
    probe = ["sh", "-c", "date +%s.%N; sleep 3"]
    result = _main(module_args, {"commands": [{"id": str(i), "argv": probe} for i in range(3)],
                                 "deadline_s": 30})
    starts = [float(r["stdout"]) for r in result["runs"]]
    assert max(starts) - min(starts) < 2.5


def test_a_command_past_its_deadline_is_stopped_and_said(module_args: Any) -> None:
    begin = time.monotonic()
    result = _main(module_args, {"commands": [
        {"id": "slow", "argv": ["sleep", "60"]}, {"id": "quick", "argv": ["true"]}], "deadline_s": 1})
    assert time.monotonic() - begin < 30
    slow, quick = result["runs"]
    assert slow["timed_out"] and slow["rc"] != 0
    assert not quick["timed_out"] and quick["rc"] == 0



def test_sequential_commands_run_one_after_another_each_with_its_own_deadline(module_args: Any) -> None:
    """Each command prints when it started and when it ended: with ``sequential`` none starts before
    the one before it ended; the deadline counts from each command's own start, so two 1.5 s
    commands under a 2 s deadline both finish, and a third past it is stopped alone."""
    probe = ["sh", "-c", "date +%s.%N; sleep 1.5; date +%s.%N"]
    commands = [{"id": str(i), "argv": probe} for i in range(2)]
    commands += [{"id": "slow", "argv": ["sleep", "60"]}, {"id": "after", "argv": ["true"]}]
    result = _main(module_args, {"commands": commands, "sequential": True, "deadline_s": 2})
    first, second = ([float(x) for x in r["stdout"].split()] for r in result["runs"][:2])
    assert second[0] >= first[1] and first[1] - first[0] >= 1.5
    assert [(r["id"], r["rc"], r["timed_out"]) for r in result["runs"][:2]] == [("0", 0, False),
                                                                                  ("1", 0, False)]
    slow, after = result["runs"][2:]
    assert slow["timed_out"] and not after["timed_out"] and after["rc"] == 0

def test_the_prefix_goes_before_every_argv(module_args: Any) -> None:
    result = _main(module_args, {"commands": [{"id": "x", "argv": ["sh", "-c", "exit 5"]}],
                                 "argv_prefix": ["timeout", "--kill-after=10s", "20s"], "deadline_s": 30})
    assert result["runs"][0]["rc"] == 5


def test_a_program_that_is_not_there_is_a_failed_run_not_a_failed_task(module_args: Any) -> None:
    result = _main(module_args, {"commands": [{"id": "x", "argv": ["/nonexistent/ib_write_bw"]}],
                                 "deadline_s": 5})
    assert result["runs"][0]["rc"] == 127 and "No such file" in result["runs"][0]["stderr"]



def test_plain_argvs_are_run_with_their_positions_as_ids(module_args: Any) -> None:
    result = _main(module_args, {"argvs": [["echo", "a"], ["echo", "b"]], "sequential": True})
    assert [(r["id"], r["stdout"]) for r in result["runs"]] == [("0", "a\n"), ("1", "b\n")]

@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"commands": [{"id": "x", "argv": []}], "deadline_s": 5}, "commands[0]: needs an id and"),
        ({"commands": [{"argv": ["true"]}], "deadline_s": 5}, "commands[0]: needs an id"),
        ({"commands": [{"id": "x", "argv": ["bin/x"]}], "deadline_s": 5}, "commands[0].argv[0]: 'bin/x'"),
        ({"commands": [{"id": "x", "argv": ["true"]}], "deadline_s": 0}, "deadline_s: 0 must be a positive"),
        ({"argvs": [["true"], []]}, "argvs[1]: needs an id and a non-empty argv list"),
        ({"argvs": [["true"]], "commands": [{"id": "x", "argv": ["true"]}]},
         "mutually exclusive: commands|argvs"),
        ({"first": [{"argv": ["true"]}]}, "first[0]: needs an id and a non-empty argv list"),
        ({"first": [{"id": "x", "argv": ["bin/x"]}]}, "first[0].argv[0]: 'bin/x' must be a program name"),
        ({"first": [{"id": "x", "argv": ["true"]}], "first_deadline_s": 0},
         "first_deadline_s: 0 must be a positive number of seconds"),
        ({"first": [{"id": "x", "argv": ["true"]}], "first_wait_max_s": -1},
         "first_wait_max_s: -1 must be 0 or more seconds"),
    ],
)
def test_bad_input_is_one_clear_error(module_args: Any, args: dict[str, Any], message: str) -> None:
    result = _main(module_args, args)
    assert result["failed"] and message in result["msg"]


# start and collect: servers left running once they listen, collected by a later call. The servers
# here are small Python listeners on the loopback address.
SERVER = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
if sys.argv[2] == "forever":
    import time; time.sleep(600)
conn, _ = s.accept(); print("served", conn.recv(16).decode()); conn.close()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _server(port: int, mode: str = "once") -> dict[str, Any]:
    return {"id": f"srv:{port}", "argv": [sys.executable, "-c", SERVER, str(port), mode], "port": port}


def test_a_started_server_listens_when_the_call_returns_and_is_collected_with_its_output(
    module_args: Any,
) -> None:
    port = _free_port()
    result = _main(module_args, {"start": [_server(port)]})
    assert not result.get("failed"), result
    (started,) = result["started"]
    assert Path(started["dir"]).is_dir() and Path(f"/proc/{started['pid']}").exists()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:  # it listens already
        conn.sendall(b"hello")
    collected = _main(module_args, {"collect": result["started"], "collect_s": 20})["collected"]
    assert collected == [{"id": f"srv:{port}", "rc": 0, "stdout": "served hello\n", "stderr": "",
                          "timed_out": False}]
    assert not Path(started["dir"]).exists()


def test_a_server_still_running_at_collect_is_stopped_and_said(module_args: Any) -> None:
    port = _free_port()
    started = _main(module_args, {"start": [_server(port, "forever")]})["started"]
    begin = time.monotonic()
    (collected,) = _main(module_args, {"collect": started, "collect_s": 0})["collected"]
    assert time.monotonic() - begin < 10
    assert collected["timed_out"] and collected["rc"] == -signal.SIGTERM
    assert not Path(f"/proc/{started[0]['pid']}").exists()


def test_a_server_that_exits_before_listening_fails_the_call_with_its_error(module_args: Any) -> None:
    bad = {"id": "bad", "argv": ["sh", "-c", "echo no such device >&2; exit 2"], "port": _free_port()}
    result = _main(module_args, {"start": [bad]})
    assert result["failed"] and result["started"] == []
    assert "start: bad exited before it listened on port" in result["msg"]
    assert "rc 2: no such device" in result["msg"]


def test_a_server_that_cannot_start_fails_the_call_naming_it(module_args: Any) -> None:
    missing = {"id": "gone", "argv": ["/nonexistent/ib_write_bw"], "port": _free_port()}
    result = _main(module_args, {"start": [missing]})
    assert result["failed"] and result["started"] == []
    assert result["msg"].startswith("start: gone: ") and "No such file or directory" in result["msg"]


def test_a_server_that_never_listens_is_stopped_at_listen_s(module_args: Any) -> None:
    token = f"{time.time():.6f}"
    mute = {"id": "mute", "argv": ["sleep", f"600.{token.replace('.', '')}"], "port": _free_port()}
    good = _server(_free_port(), "forever")
    result = _main(module_args, {"start": [good, mute], "listen_s": 1})
    assert result["failed"] and "start: mute did not listen on port" in result["msg"]
    assert "within 1 s" in result["msg"]
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", mute["argv"][1]], capture_output=True, check=False)
    assert left.stdout == b""  # both were stopped, the one that listened too
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", good["port"]), timeout=2).close()


def test_the_call_returns_while_its_servers_run(tmp_path: Path) -> None:
    """The servers hold no descriptor of the module's: over SSH the task ends when the module does,
    not when its servers do (run as Ansible runs it, its output read to the end)."""
    port = _free_port()
    code = (f"import sys; sys.path.insert(0, {str(COLLECTIONS)!r}); "
            "from ansible_collections.fabtune.fabric.plugins.modules.fabric_run import main; main()")
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"start": [_server(port, "forever")]}})
    done = subprocess.run([sys.executable, "-c", code], input=args, capture_output=True, text=True,
                          timeout=30, check=False)
    result = json.loads(done.stdout)
    assert done.returncode == 0 and len(result["started"]) == 1, done
    load = run.collect_all(result["started"], 0)
    assert load[0]["timed_out"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"collect": [{"id": "x", "pid": 4242, "dir": "/etc"}]},
         "collect[0].dir: '/etc': not one fabric_run made"),
        ({"collect": [{"id": "x", "pid": 4242, "dir": "/tmp/../etc/fabtune-run-x"}]},
         "collect[0].dir: '/tmp/../etc/fabtune-run-x': not one fabric_run made"),
        ({"collect": [{"id": "x", "pid": "1; rm", "dir": "/tmp/fabtune-run-x"}]},
         "collect[0]: needs the id and pid"),
        ({"start": [{"id": "x", "argv": ["true"], "port": "http"}]}, "start[0].port: 'http' must be a port"),
        ({"start": [{"id": "x", "argv": ["true"], "port": 70000}]}, "start[0].port: 70000 must be a port"),
        ({"start": [{"id": "x", "argv": [], "port": 1}]}, "start[0]: needs an id and a non-empty argv"),
        ({"listen_s": 0}, "listen_s: 0 must be a positive number of seconds"),
    ],
)
def test_bad_start_and_collect_arguments_are_refused_by_name(
    module_args: Any, args: dict[str, Any], message: str
) -> None:
    result = _main(module_args, args)
    assert result["failed"] and message in result["msg"]


def test_a_tcp_listener_is_read_from_ss_by_its_local_port() -> None:
    """``ss -Hltn`` lines (iproute2: state, recv-q, send-q, local ADDR:PORT, peer): v4, v6 and any."""
    text = ("LISTEN 0      4096         0.0.0.0:18515      0.0.0.0:*\n"
            "LISTEN 0      4096            [::]:18517         [::]:*\n"
            "LISTEN 0      128                *:22               *:*\n")
    assert run.listening_tcp(text, 18515) and run.listening_tcp(text, 18517) and run.listening_tcp(text, 22)
    assert not run.listening_tcp(text, 1851) and not run.listening_tcp(text, 185150)
    assert not run.listening_tcp("", 18515)


def test_several_servers_are_started_and_each_listens_when_the_call_returns(module_args: Any) -> None:
    ports = [_free_port() for _ in range(3)]
    started = _main(module_args, {"start": [_server(p, "forever") for p in ports]})["started"]
    for port in ports:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert [r["timed_out"] for r in run.collect_all(started, 0)] == [True, True, True]


# A server that will not stop on SIGTERM (it says when the signal came, and goes on): only SIGKILL
# ends it.
STUBBORN = """
import signal, socket, sys, time
def said(signum, frame):
    print("term", time.time(), flush=True)
signal.signal(signal.SIGTERM, said)
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
while True:
    time.sleep(0.05)
"""


def test_servers_left_behind_are_stopped_together_not_one_after_another(
    module_args: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each gets SIGTERM at once and SIGKILL one grace period later: with 8 NICs a host has 8
    servers, and one at a time a stop that SIGTERM does not end took 8 grace periods."""
    monkeypatch.setattr(run, "KILL_AFTER_S", 1.0)
    ports = [_free_port() for _ in range(3)]
    started = _main(module_args, {"start": [
        {"id": f"srv:{p}", "argv": [sys.executable, "-c", STUBBORN, str(p)], "port": p} for p in ports
    ]})["started"]
    said = run.collect_all(started, 0)
    assert [(r["timed_out"], r["rc"]) for r in said] == [(True, -signal.SIGKILL)] * 3, said
    terms = [float(r["stdout"].split()[1]) for r in said]
    # one after another, each SIGTERM would come a grace period (1 s here) after the one before
    assert max(terms) - min(terms) < 0.5, terms
    assert not any(run._alive(entry) for entry in started)


# first, then collect, then commands: a round's clients, the wait for the host's servers (started by
# an earlier call; their clients may be elsewhere and start later), then the counters read after.
TIMED_SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
conn, _ = s.accept(); conn.recv(16); conn.close(); print(time.time())
"""
NOW = [sys.executable, "-c", "import time; print(time.time())"]


def _connect_later(port: int, delay_s: float) -> threading.Thread:
    """A client of the server on another host: it connects ``delay_s`` from now, in the background."""
    def connect() -> None:
        time.sleep(delay_s)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"late")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    return thread


def test_first_runs_the_clients_then_the_collect_waits_for_the_servers_then_the_reads_run(
    module_args: Any,
) -> None:
    """The host's own client ends at once; its server's client (on another host) connects 2 s
    later: the collect waits for the server to end by itself, and the reads start after it."""
    port = _free_port()
    server = {"id": "srv", "argv": [sys.executable, "-c", TIMED_SERVER, str(port)], "port": port}
    started = _main(module_args, {"start": [server]})["started"]
    late = _connect_later(port, 2.0)
    result = _main(module_args, {
        "first": [{"id": "client", "argv": NOW}], "first_deadline_s": 30,
        "collect": started, "collect_s": 30,
        "commands": [{"id": "read", "argv": NOW}], "deadline_s": 30,
    })
    late.join()
    assert not result.get("failed"), result
    (client,), (collected,), (read,) = result["first_runs"], result["collected"], result["runs"]
    assert (client["id"], client["rc"], client["timed_out"]) == ("client", 0, False)
    assert (collected["id"], collected["rc"], collected["timed_out"]) == ("srv", 0, False)
    client_end, server_end, read_start = (float(r["stdout"]) for r in (client, collected, read))
    assert server_end - client_end >= 1.5  # the server ended well after the client, not stopped
    assert read_start >= server_end
    assert result["started"] == []


def test_first_has_its_own_prefix_and_deadline(module_args: Any) -> None:
    """``first`` runs under ``first_prefix`` until ``first_deadline_s``; ``commands`` keep theirs."""
    begin = time.monotonic()
    result = _main(module_args, {
        "first": [{"id": "slow", "argv": ["sleep", "60"]}, {"id": "code", "argv": ["sh", "-c", "exit 5"]}],
        "first_prefix": ["timeout", "--kill-after=10s", "20s"], "first_deadline_s": 1,
        "commands": [{"id": "read", "argv": ["sh", "-c", "sleep 1.5; echo read"]}], "deadline_s": 30,
    })
    assert time.monotonic() - begin < 30
    slow, code = result["first_runs"]
    assert slow["timed_out"] and not code["timed_out"] and code["rc"] == 5
    assert result["runs"] == [{"id": "read", "rc": 0, "stdout": "read\n", "stderr": "", "timed_out": False}]


def test_a_call_without_first_keeps_its_order_and_reports_no_first_runs(module_args: Any) -> None:
    """Every caller before ``first``: collect, then commands (a read after the servers ended)."""
    port = _free_port()
    server = {"id": "srv", "argv": [sys.executable, "-c", TIMED_SERVER, str(port)], "port": port}
    started = _main(module_args, {"start": [server]})["started"]
    late = _connect_later(port, 1.0)
    result = _main(module_args, {"collect": started, "collect_s": 30,
                                 "commands": [{"id": "read", "argv": NOW}]})
    late.join()
    assert result["first_runs"] == []
    assert float(result["runs"][0]["stdout"]) >= float(result["collected"][0]["stdout"])


def test_first_starts_at_the_given_instant_and_says_how_late_it_was(module_args: Any) -> None:
    """``first_at``: every host of a round starts its clients at one instant; one that got the call
    after it starts at once and says how late."""
    at = time.time() + 1.5
    result = _main(module_args, {"first": [{"id": "client", "argv": NOW}], "first_at": at})
    (client,) = result["first_runs"]
    assert float(client["stdout"]) >= at and result["first_late_s"] == 0.0
    assert 0.5 < result["first_wait_s"] <= 1.5  # the lead it did not need
    past = time.time() - 3.0
    result = _main(module_args, {"first": [{"id": "client", "argv": NOW}], "first_at": past})
    assert result["first_late_s"] >= 3.0 and result["first_wait_s"] == 0.0


def test_first_at_never_waits_past_its_maximum(module_args: Any) -> None:
    """A host whose clock is far behind the controller's waits ``first_wait_max_s``, never hangs."""
    begin = time.monotonic()
    result = _main(module_args, {"first": [{"id": "client", "argv": ["true"]}],
                                 "first_at": time.time() + 600, "first_wait_max_s": 1})
    assert 1.0 <= time.monotonic() - begin < 60
    assert result["first_runs"][0]["rc"] == 0 and result["first_late_s"] == 0.0
    assert result["first_wait_s"] == 1.0
