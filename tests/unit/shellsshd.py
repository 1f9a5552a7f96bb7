"""An SSH server on loopback (paramiko's) that runs each command it is sent with ``/bin/sh -c`` in a
work directory, as an OpenSSH server runs it through the login's shell: for the direct channel's tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import paramiko

from fabtune import sshdirect


class ShellServer(paramiko.ServerInterface):
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

        def pump(stream: Any, send: Any) -> None:
            """Pass the command's output on as it comes, as sshd does."""
            for chunk in iter(lambda: stream.read1(65536), b""):
                try:
                    send(chunk)
                except (OSError, EOFError, paramiko.SSHException):
                    return  # the client gave the command up

        def answer() -> None:
            pumps = [threading.Thread(target=pump, args=(proc.stdout, channel.sendall), daemon=True),
                     threading.Thread(target=pump, args=(proc.stderr, channel.sendall_stderr), daemon=True)]
            for each in pumps:
                each.start()
            rc = proc.wait()
            for each in pumps:
                each.join()
            try:
                if rc >= 0:
                    channel.send_exit_status(rc)  # a signal's end sends no status (sshd: exit-signal)
                channel.close()
            except (OSError, EOFError, paramiko.SSHException):
                pass

        threading.Thread(target=answer, daemon=True).start()
        return True


@contextmanager
def serving(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The server's target ``h01`` (user ops, its key and known_hosts in ``tmp_path``), its work
    directory, its transports; every process it started is killed at the end."""
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
            transport.start_server(server=ShellServer(client_key, workdir, procs))
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
    for proc in procs:  # each command leads its own session: whatever it started goes with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
