"""The emulated NICs' counter engine: one per host, started by hostinit (``daemons.json``).

On a real host the NIC itself counts the traffic; ``ethtool -S`` and the read-only sysfs
``hw_counters``/``counters`` files only show what the hardware counted, and no user writes them.
In the emulation the benchmark that moved the traffic (``ib_write_bw``, an nccl-tests rank) knows
the deltas. Run as root it adds them itself (``NodeState.add_counters``); run as an ordinary user
(a non-root login) it may not write the host's NIC state, so it posts them here instead: this
daemon runs as root inside the host and applies them, the way the hardware would, before it answers.

Protocol (``/run/fabtune-nicd.sock``, a Unix stream socket anyone may connect to, as anyone may post
work to an RDMA device): one JSON line ``{"netdev": IF, "deltas": {NAME: INT}}``, answered with
``ok`` or ``error REASON``. Only counter increments are accepted, nothing else of the NIC's state.
Each applied post is logged (stdout, ``/var/log/fabtune-nicd.log``) with the poster's credentials
(``SO_PEERCRED``) and command name: ``applied N counters to IF for uid=U pid=P (COMM)``.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

from fabtune.sim.node import NodeState

SOCKET = Path("/run/fabtune-nicd.sock")
POST_TIMEOUT_S = 10.0
MAX_REQUEST = 1 << 20


class NicdError(OSError):
    """The counter engine refused or could not take a post."""


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(MAX_REQUEST)
        try:
            request = json.loads(line)
            deltas = {str(k): int(v) for k, v in dict(request["deltas"]).items()}
            if any(v < 0 for v in deltas.values()):
                raise ValueError("counters only grow")
            NodeState.inside_host().add_counters(str(request["netdev"]), deltas)
        except (ValueError, KeyError, TypeError, LookupError, OSError) as exc:
            self.wfile.write(f"error {exc}\n".encode())
            return
        pid, uid, _gid = peer_credentials(self.request)
        print(f"applied {len(deltas)} counters to {request['netdev']} for uid={uid} pid={pid} "
              f"({_comm(pid)})", flush=True)
        self.wfile.write(b"ok\n")


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve(path: Path = SOCKET) -> None:
    """Answer posts on ``path`` until killed (the host's end)."""
    path.unlink(missing_ok=True)
    with _Server(str(path), _Handler) as server:
        path.chmod(0o666)
        print(f"fabtune-nicd: listening on {path}", flush=True)
        server.serve_forever()


def post(netdev: str, deltas: Mapping[str, int], path: Path = SOCKET) -> None:
    """Have the host's counter engine add ``deltas`` to ``netdev``'s counters; returns once applied.

    Raises:
        NicdError: when the engine is not running or refuses the post.
    """
    request = json.dumps({"netdev": netdev, "deltas": dict(deltas)}) + "\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(POST_TIMEOUT_S)
            sock.connect(str(path))
            sock.sendall(request.encode())
            with sock.makefile("r") as reply:
                answer = reply.readline().strip()
    except OSError as exc:
        raise NicdError(f"NIC counter engine at {path}: {exc}") from exc
    if answer != "ok":
        raise NicdError(f"NIC counter engine at {path}: {answer or 'no answer'}")


if __name__ == "__main__":
    serve(Path(sys.argv[1]) if len(sys.argv) > 1 else SOCKET)
