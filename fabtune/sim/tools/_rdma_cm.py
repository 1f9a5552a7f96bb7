"""The emulated RDMA CM: listening cm_ids of perftest ``-R`` servers, shared by perftest and ``rdma``.

A real perftest server started with ``-R`` opens no kernel TCP socket: ``-R`` sets ``work_rdma_cm``
and with it ``use_rdma_cm`` (perftest 4.5-0.17, Debian 12's, ``src/perftest_parameters.c`` lines
2442 and 1274-1294), so ``establish_connection`` takes ``rdma_server_connect`` instead of
``ethernet_server_connect`` (``src/perftest_communication.c`` lines 1350-1366): an RDMA CM id of
port space TCP bound to ``0.0.0.0:<-p>`` and put in LISTEN (``rdma_bind_addr``/``rdma_listen``,
lines 1111-1150). ``ss`` never sees it; ``rdma resource show cm_id`` does.

The emulation keeps that split: the server publishes a listener record
``cm/<host>-<port>-<pid>.json`` in the shared fabric directory and accepts its client on a Unix
socket ``cm/<host>-<port>-<pid>.sock`` beside it (the stand-in for the CM's connection request; a
pathname socket crosses the hosts' network namespaces and is no TCP socket). The client finds the
record by the server's IPv4 address and port. A record whose process is gone (SIGTERM/SIGKILL from
``timeout``) counts as destroyed, as the kernel destroys a process's cm_ids when it exits; the
names carry the pid so that no user ever has to replace another user's file in the sticky
directory.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.sim.node import atomic_write
from fabtune.sim.tools import process_pid

CM_DIR = "cm"


@dataclass(frozen=True)
class Listener:
    """One listening cm_id: the server's host, port, process and the addresses it answers on."""

    host: str
    port: int
    pid: int
    start: str
    created: float
    addresses: tuple[str, ...]
    devices: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON form."""
        return {"host": self.host, "port": self.port, "pid": self.pid, "start": self.start,
                "created": self.created, "addresses": list(self.addresses), "devices": list(self.devices)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Listener:
        """A record read back."""
        return cls(str(raw["host"]), int(raw["port"]), int(raw["pid"]), str(raw["start"]),
                   float(raw["created"]), tuple(str(a) for a in raw["addresses"]),
                   tuple(str(d) for d in raw["devices"]))


def _paths(fabric_dir: Path, host: str, port: int, pid: int) -> tuple[Path, Path]:
    base = fabric_dir / CM_DIR / f"{host}-{port}-{pid}"
    return base.with_suffix(".json"), base.with_suffix(".sock")


def proc_start(pid: int | str) -> str | None:
    """The start time (``/proc/<pid>/stat`` field 22, clock ticks since boot) of a live process,
    None when it is gone; ``pid`` "self": the caller's own, whichever PID namespace /proc shows."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def proc_comm(pid: int) -> str | None:
    """``/proc/<pid>/comm`` (what iproute2's ``get_task_name`` reads), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _alive(listener: Listener) -> bool:
    return proc_start(listener.pid) == listener.start


def _read(path: Path) -> Listener | None:
    try:
        return Listener.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _records(fabric_dir: Path) -> list[Listener]:
    found = []
    for path in sorted((fabric_dir / CM_DIR).glob("*.json")):
        entry = _read(path)
        if entry is not None:
            found.append(entry)
    return found


def _prune(fabric_dir: Path, host: str) -> None:
    """Remove this host's records of processes that are gone (where this user may)."""
    for entry in _records(fabric_dir):
        if entry.host == host and not _alive(entry):
            for path in _paths(fabric_dir, entry.host, entry.port, entry.pid):
                with contextlib.suppress(OSError):
                    path.unlink()


@contextlib.contextmanager
def listen(fabric_dir: Path, host: str, port: int, addresses: Sequence[str],
           devices: Sequence[str]) -> Iterator[socket.socket | None]:
    """Bind and publish a listening cm_id on ``port``; None when a live one holds it (EADDRINUSE).

    The record and the socket are removed when the block ends.
    """
    (fabric_dir / CM_DIR).mkdir(parents=True, exist_ok=True)
    _prune(fabric_dir, host)
    if any(e.port == port for e in listeners(fabric_dir, host)):
        yield None
        return
    pid = process_pid()  # the process its caller started: the launcher's, where the server runs it
    record, sock_path = _paths(fabric_dir, host, port, pid)
    with contextlib.suppress(FileNotFoundError):
        sock_path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    me = Listener(host, port, pid, proc_start(pid) or "", time.time(), tuple(addresses), tuple(devices))
    try:
        sock.bind(str(sock_path))
        sock.listen(1)
        atomic_write(record, json.dumps(me.to_dict(), sort_keys=True) + "\n")
    except OSError:
        sock.close()
        yield None
        return
    try:
        yield sock
    finally:
        sock.close()
        for path in (record, sock_path):
            with contextlib.suppress(OSError):
                path.unlink()


def listeners(fabric_dir: Path, host: str | None = None) -> list[Listener]:
    """The live listeners (of ``host``, or every host), oldest first (the order of their cm_id numbers).

    Liveness is read from ``/proc``: only the listeners of this host's PID namespace can be judged.
    """
    found = [e for e in _records(fabric_dir) if (host is None or e.host == host) and _alive(e)]
    return sorted(found, key=lambda e: (e.host, e.created, e.port))


def sockets_for(fabric_dir: Path, address: str, port: int) -> list[Path]:
    """The Unix sockets of the listeners answering ``address:port``, newest first.

    A client cannot judge liveness (the server's host has its own PID namespace): a socket whose
    server is gone refuses the connection.
    """
    found = [e for e in _records(fabric_dir) if e.port == port and address in e.addresses]
    found.sort(key=lambda e: e.created, reverse=True)
    return [_paths(fabric_dir, e.host, e.port, e.pid)[1] for e in found]
