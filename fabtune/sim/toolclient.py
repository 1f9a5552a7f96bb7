"""The launcher's side of the tool server (fabtune.sim.toolserver): hand this call to the host's
server, or run the tool here where no server answers.

Imported by the launchers the testbed installs for the served tools, each started without ``site``
(``python -S``): this module imports only what the interpreter has already loaded, and ``_socket``.
The call is this process's argv, environment, working directory and umask, with its standard
input, output and error passed as file descriptors (``SCM_RIGHTS``), so the tool reads and writes
the caller's own pipes or terminal; the server answers the tool's exit status.
"""

from __future__ import annotations

import os
import sys

SOCKET = "/run/fabtune-tools.sock"
STATUS_BYTES = 4
LENGTH_BYTES = 8
NO_STATUS = 70  # EX_SOFTWARE: the server took the call and gave no status


def request(name: str, launched: float) -> bytes:
    """The call as the server reads it: a Python literal of (name, argv, environment, cwd, umask,
    launched), UTF-8, behind its length."""
    try:
        cwd = os.getcwd()  # noqa: PTH109  # pathlib is not loaded here, and costs its import
    except OSError:
        cwd = "/"
    umask = os.umask(0)
    os.umask(umask)
    body = repr((name, list(sys.argv), dict(os.environ), cwd, umask, launched)).encode()
    return len(body).to_bytes(LENGTH_BYTES, "little") + body


def served(name: str, launched: float, path: str | None = None) -> int | None:
    """Run ``name`` through the server at ``path`` (``SOCKET``): its exit status, or None where no
    server took the call (nothing ran)."""
    import _socket

    data = request(name, launched)
    fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path or SOCKET)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError:  # no server (not started yet, or a host booting), or a closed standard stream
        sock.close()
        return None
    try:
        sock.sendall(data[sent:])
        status = b""
        while len(status) < STATUS_BYTES:
            chunk = sock.recv(STATUS_BYTES - len(status))
            if not chunk:
                break
            status += chunk
    except OSError:
        status = b""
    finally:
        sock.close()
    if len(status) < STATUS_BYTES:
        os.write(2, f"{name}: the emulated tool ended without a status (fabtune tool server)\n".encode())
        return NO_STATUS
    return int.from_bytes(status, "little", signed=True)


def run(name: str, launched: float) -> None:
    """The launcher's entry (it does not return): the server's answer, else the tool run in this
    process."""
    code = served(name, launched)
    if code is None:
        from fabtune.sim.tools import run as run_here

        run_here(name, launched)
    os._exit(code)
