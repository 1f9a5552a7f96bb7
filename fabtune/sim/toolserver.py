"""The emulated host's tool server: one per host, started by hostinit (``daemons.json``).

Each emulated tool is a Python program, and most of a short tool's CPU time (``ethtool -i``,
``mlnx_qos -i``, ``nvidia-smi topo -m``: about 0.1 s each) went to starting the interpreter and
importing the emulator, not to the tool's work; an Ansible run of the roles calls hundreds of them
(docs/benchmarks.md). This server imports the served tools once and forks a child per call: the
child takes the caller's standard input, output and error (passed with the call as file
descriptors), its argv, environment, working directory, umask, resource limits and identity
(``SO_PEERCRED``: the caller's uid and gid, with that user's groups), runs the tool as the launcher
would, and answers its exit status. What the tool reads and writes, and what the caller sees, are
the same as when the launcher runs it itself, which it does whenever no server answers (before the
server has started, while a host boots, or where a standard stream is closed).

Served are the tools that read or set state and exit, and the benchmarks (each rank of an mpirun
launch, each ib_write_bw): their launchers are what mpirun, orted and the caller start, wait for and
signal. A served child ends the moment its caller is gone (killed by a signal, its deadline past),
as a tool running in the launcher's own process would have ended with it. The child is named as
the tool (``/proc/PID/comm``, every thread). The pid a tool shows to others is the launcher's, the
process its caller started (``ibstat``'s ``[PID]``, an rdma_cm listener in ``rdma resource show``:
``tools.process_pid``); NCCL's ``host:pid:tid`` lines name the child, whose pid and thread ids go
together, a live process of the tool's name. perftest's start-up allowance counts from when the
launcher was forked (its pid, from the socket's credentials) or its first line (``launched``,
which the call carries). Not served:
the emulated systemd (it forks timers and services, and waits on them) and lldpad/lldptool (their
sockets are named by the pid of the process that binds them).

Protocol (``/run/fabtune-tools.sock``, a Unix stream socket anyone may connect to, as anyone may run
the tools): the caller sends 8 bytes of length (little-endian) and a Python literal
``(name, argv, environ, cwd, umask, launched)``, its file descriptors 0, 1 and 2 in the first
message's ``SCM_RIGHTS``; the server answers the exit status as 4 bytes (little-endian, signed).
Each call is logged (``/var/log/fabtune-toolserver.log``): ``NAME uid=U pid=P: STATUS``.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import importlib
import os
import pwd
import resource
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from fabtune.sim import toolclient
from fabtune.sim.nicd import peer_credentials
from fabtune.sim.tools import ENTRIES

SOCKET = Path(toolclient.SOCKET)
SERVED = frozenset({
    "mlnx_qos", "dcb", "ibdev2netdev", "show_gids", "ibstat", "ibstatus", "ibv_devinfo", "nvidia-smi",
    "ethtool", "cma_roce_tos", "cma_roce_mode", "sminfo", "rdma",
    "ib_write_bw", "ib_read_bw", "ib_send_bw",
    "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf",
})
PR_SET_NAME = 15  # prctl(2): the calling thread's name, /proc/PID/comm (15 bytes)
MAX_REQUEST = 1 << 22  # an environment of megabytes is refused, not read
BACKLOG = 64
RECEIVE_TIMEOUT_S = 10.0
CALLER_GONE = 143  # the child's status when its caller went first (nobody reads it: 128 + SIGTERM)


class RequestError(ValueError):
    """A call the server cannot read."""


def _receive(conn: socket.socket) -> tuple[tuple[Any, ...], list[int]]:
    """The call and the caller's file descriptors (0, 1, 2) from ``conn``."""
    fds: list[int] = []
    data, ancillary, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(payload[i:i + 4], sys.byteorder, signed=True)
                    for i in range(0, len(payload) - len(payload) % 4, 4)]
    received = bytearray(data)
    while len(received) < toolclient.LENGTH_BYTES:
        received += _more(conn, toolclient.LENGTH_BYTES - len(received))
    length = int.from_bytes(received[:toolclient.LENGTH_BYTES], "little")
    if length > MAX_REQUEST:
        raise RequestError(f"call of {length} bytes")
    body = received[toolclient.LENGTH_BYTES:]
    while len(body) < length:
        body += _more(conn, length - len(body))
    call = ast.literal_eval(body.decode())
    if not (isinstance(call, tuple) and len(call) == 6 and call[0] in SERVED and len(fds) == 3):
        raise RequestError("not a call of a served tool with its three standard streams")
    return call, fds


def _more(conn: socket.socket, size: int) -> bytes:
    chunk = conn.recv(size)
    if not chunk:
        raise RequestError("call cut short")
    return chunk


def _take_limits(pid: int) -> None:
    """Take the caller's resource limits (``ulimit``; ``prlimit(2)`` of its pid): a tool started by
    the caller inherits them. A limit this server may not set (above its own hard limit, where it
    does not run as root) stays the server's."""
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            with contextlib.suppress(OSError, ValueError):
                limit = getattr(resource, name)
                resource.setrlimit(limit, resource.prlimit(pid, limit))


def _become(uid: int, gid: int) -> None:
    """Take the caller's identity: its gid, its user's groups, its uid (a root server drops to it)."""
    if (uid, gid) == (os.geteuid(), os.getegid()):
        return
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:
        groups = [gid]
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)


def _take_streams(fds: list[int]) -> None:
    """Make the caller's descriptors this process's 0, 1 and 2, with Python's streams over them as a
    fresh interpreter opens its own (UTF-8; stdout line-buffered on a terminal, stderr always)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,  # noqa: SIM115
                      closefd=False)


def _name_process(argv0: str) -> None:
    """Name this process as the kernel names a program it executes: ``/proc/PID/comm`` is the first
    15 bytes of the executable's file name, the tool's installed name (``ps``, ``pgrep``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, Path(argv0).name.encode()[:15], 0, 0, 0)


def _run_tool(name: str, argv: list[str], launched: float, launcher: int) -> int:
    """Run tool ``name`` as its launcher (pid ``launcher``) would; its exit status."""
    from fabtune.sim.tools import run

    sys.argv = list(argv)
    code: int
    try:
        run(name, launched, launcher)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = int(done.code or 0)
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:  # as the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):
            stream.flush()
    return code


def _end_with_caller(conn: socket.socket) -> None:
    """End this child when its caller closes the call (it exits only after the status came, so
    before that, only when it was killed): the tool would have died with the caller's process."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1):
                pass
        os._exit(CALLER_GONE)

    threading.Thread(target=watch, name="caller", daemon=True).start()


def _serve_call(conn: socket.socket) -> None:
    """In the forked child: run one call and answer its status; never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the tool's own subprocesses are waited for
    try:
        conn.settimeout(RECEIVE_TIMEOUT_S)
        (name, argv, environ, cwd, umask, launched), fds = _receive(conn)
        pid, uid, gid = peer_credentials(conn)
        conn.settimeout(None)
        _name_process(str(argv[0]) if argv else str(name))  # first: the watch's thread takes it too
        _end_with_caller(conn)
        _take_limits(pid)
        _become(uid, gid)
        _take_streams(fds)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        os.umask(int(umask))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(environ).items()})
        status = _run_tool(str(name), [str(a) for a in argv], float(launched), pid)
        _log(f"{name} uid={uid} pid={pid}: {status}")  # first: the caller's exit ends this child
        conn.sendall(status.to_bytes(toolclient.STATUS_BYTES, "little", signed=True))
    except (OSError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        _log(f"call refused: {exc!r}")
    finally:
        os._exit(0)


LOG_FD = 3  # the server's log, kept open for the children (their 1 and 2 are the caller's)


def _log(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(LOG_FD, f"{line}\n".encode())


def serve(path: Path = SOCKET) -> None:
    """Import the served tools, then answer calls on ``path`` until killed (the host's end)."""
    for module in sorted({ENTRIES[name][0] for name in SERVED}):
        importlib.import_module(f"fabtune.sim.tools.{module}")
    os.dup2(1, LOG_FD, inheritable=False)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        path.chmod(0o666)
        server.listen(BACKLOG)
        print(f"fabtune-toolserver: serving {len(SERVED)} tools on {path}", flush=True)
        while True:
            conn, _ = server.accept()
            sys.stdout.flush()
            if os.fork() == 0:
                server.close()
                _serve_call(conn)
            conn.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]) if len(sys.argv) > 1 else SOCKET)
