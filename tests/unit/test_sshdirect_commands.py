"""``sshdirect.run_commands``: several commands per host over one connection, as fabric_run runs them.

The server is paramiko's, on loopback, and runs each command it is sent with ``/bin/sh -c`` (as an
OpenSSH server runs it through the login's shell) in a temporary directory: the commands here only
sleep, print and touch files there.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from fabtune import sshdirect


class _ShellServer(paramiko.ServerInterface):
    """Accepts the client key; runs each exec request's command with ``/bin/sh -c`` in ``workdir``."""

    def __init__(self, client_key: paramiko.PKey, workdir: Path,
                 procs: list[subprocess.Popen[bytes]]) -> None:
        self.client_key = client_key
        self.workdir = workdir
        self.procs = procs

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = key.get_base64() == self.client_key.get_base64()
        return int(paramiko.common.AUTH_SUCCESSFUL if ok else paramiko.common.AUTH_FAILED)

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return int(paramiko.common.OPEN_SUCCEEDED)

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        proc = subprocess.Popen(["/bin/sh", "-c", command.decode()], cwd=self.workdir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.procs.append(proc)

        def answer() -> None:
            out, err = proc.communicate()
            try:
                channel.sendall(out)
                channel.sendall_stderr(err)
                channel.send_exit_status(proc.returncode)
                channel.close()
            except (OSError, EOFError, paramiko.SSHException):
                pass  # the client gave the command up

        threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[dict[str, Any]]:
    host_key = paramiko.ECDSAKey.generate()
    client_key = paramiko.ECDSAKey.generate()
    client_key.write_private_key_file(str(tmp_path / "id"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    procs: list[subprocess.Popen[bytes]] = []
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(host_key)
            transport.start_server(server=_ShellServer(client_key, workdir, procs))
            transports.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    target = sshdirect.target("h01", {
        "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "ops",
        "ansible_ssh_private_key_file": str(tmp_path / "id"),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known}"})
    yield {"targets": {"h01": target}, "work": workdir, "transports": transports}
    listener.close()
    for transport in transports:
        transport.close()
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
