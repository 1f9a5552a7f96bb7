"""The emulated RDMA CM: listening cm_ids of perftest ``-R`` servers, shared by perftest and ``rdma``.

A real perftest server started with ``-R`` opens no kernel TCP socket: ``-R`` sets ``work_rdma_cm``
and with it ``use_rdma_cm`` (perftest 4.5-0.17, Debian 12's, ``src/perftest_parameters.c`` lines
2442 and 1274-1294), so ``establish_connection`` takes ``rdma_server_connect`` instead of
``ethernet_server_connect`` (``src/perftest_communication.c`` lines 1350-1366): an RDMA CM id of
port space TCP bound to ``0.0.0.0:<-p>`` and put in LISTEN (``rdma_bind_addr``/``rdma_listen``,
lines 1111-1150). ``ss`` never sees it; ``rdma resource show cm_id`` does.

The emulation keeps that split: the server publishes a listener record
``cm/<host>-<port>.json`` in the shared fabric directory and accepts its client on a Unix socket
``cm/<host>-<port>.sock`` beside it (the stand-in for the CM's connection request; a pathname socket
crosses the hosts' network namespaces and is no TCP socket). The client finds the record by the
server's IPv4 address and port. A record whose process is gone (SIGTERM/SIGKILL from ``timeout``)
counts as destroyed, as the kernel destroys a process's cm_ids when it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.sim.node import atomic_write
from fabtune.sim.tools import _fabric

CM_DIR = "cm"


@dataclass(frozen=True)
class Listener:
    """One listening cm_id: the server's host, port, process and the addresses it answers on."""

    host: str
    port: int
    pid: int
    start: str
    cm_idn: int
    addresses: tuple[str, ...]
    devices: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON form."""
        return {"host": self.host, "port": self.port, "pid": self.pid, "start": self.start,
                "cm_idn": self.cm_idn, "addresses": list(self.addresses), "devices": list(self.devices)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Listener:
        """A record read back."""
        return cls(str(raw["host"]), int(raw["port"]), int(raw["pid"]), str(raw["start"]),
                   int(raw["cm_idn"]), tuple(str(a) for a in raw["addresses"]),
                   tuple(str(d) for d in raw["devices"]))


def _paths(fabric_dir: Path, host: str, port: int) -> tuple[Path, Path]:
    base = fabric_dir / CM_DIR / f"{host}-{port}"
    return base.with_suffix(".json"), base.with_suffix(".sock")


def proc_start(pid: int) -> str | None:
    """The start time (``/proc/<pid>/stat`` field 22) of a live process, None when it is gone."""
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


def _next_idn(fabric_dir: Path, host: str) -> int:
    """The next cm_id number of ``host`` (the kernel's restrack ids count up, cyclic)."""
    counter = fabric_dir / CM_DIR / f"{host}.idn"
    with _fabric.locked(fabric_dir / CM_DIR / f".{host}.idn.lock"):
        current = int(counter.read_text().strip() or 0) if counter.exists() else 0
        atomic_write(counter, f"{current + 1}\n")
    return current


@contextlib.contextmanager
def listen(fabric_dir: Path, host: str, port: int, addresses: Sequence[str],
           devices: Sequence[str]) -> Iterator[socket.socket | None]:
    """Bind and publish a listening cm_id on ``port``; None when a live one holds it (EADDRINUSE).

    The record and the socket are removed when the block ends.
    """
    record, sock_path = _paths(fabric_dir, host, port)
    record.parent.mkdir(parents=True, exist_ok=True)
    held = _read(record)
    if held is not None and _alive(held):
        yield None
        return
    with contextlib.suppress(FileNotFoundError):
        sock_path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(sock_path))
        sock.listen(1)
    except OSError:
        sock.close()
        yield None
        return
    pid = os.getpid()
    me = Listener(host, port, pid, proc_start(pid) or "", _next_idn(fabric_dir, host),
                  tuple(addresses), tuple(devices))
    try:
        atomic_write(record, json.dumps(me.to_dict(), sort_keys=True) + "\n")
    except OSError:  # another user's stale record in the sticky directory
        sock.close()
        yield None
        return
    try:
        yield sock
    finally:
        sock.close()
        if _read(record) == me:
            with contextlib.suppress(OSError):
                record.unlink()
            with contextlib.suppress(OSError):
                sock_path.unlink()


def listeners(fabric_dir: Path, host: str | None = None) -> list[Listener]:
    """The live listeners (of ``host``, or every host), oldest cm_id first."""
    found = []
    for path in sorted((fabric_dir / CM_DIR).glob("*.json")):
        entry = _read(path)
        if entry is not None and (host is None or entry.host == host) and _alive(entry):
            found.append(entry)
    return sorted(found, key=lambda e: (e.host, e.cm_idn))


def socket_for(fabric_dir: Path, address: str, port: int) -> Path | None:
    """The Unix socket of the listener answering ``address:port`` (None: no such listener).

    Liveness is the connect's business: the client may run in another PID namespace.
    """
    for path in sorted((fabric_dir / CM_DIR).glob("*.json")):
        entry = _read(path)
        if entry is not None and entry.port == port and address in entry.addresses:
            return _paths(fabric_dir, entry.host, port)[1]
    return None
