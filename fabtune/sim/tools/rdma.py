"""Emulated ``rdma`` (iproute2 6.1, Debian 12's ``/usr/bin/rdma``): ``resource show cm_id`` only.

Follows iproute2 v6.1.0: options ``-j`` (JSON), ``-p`` (pretty), ``-d`` and ``-V``
(``rdma/rdma.c`` ``main``); objects and verbs match by prefix as ``rd_argv_match`` does, so
``rdma res show cm_id`` works too (``rdma/res.c`` ``cmd_res``/``res_show``). One line or one JSON
object per cm_id (``rdma/res-cmid.c`` ``res_cm_id_line``), for every device and port
(``rdma/utils.c`` ``rd_exec_link``); with ``-j`` all of them make one JSON array.

The emulated host has the listening cm_ids of perftest ``-R``/``-z`` servers (``_rdma_cm``). A
listener bound to the wildcard address holds one child cm_id per RDMA device, with no port
(``link mlx5_0/-``), no QP (no ``lqpn``/``qp-type``) and no destination, as the kernel reports it
(kernel commit ecacb3751f25, "RDMA/nldev: Return -EAGAIN if the cm_id isn't from expected port",
shows ``link mlx5_0/- cm-idn 0 state LISTEN ps TCP pid 26395 comm rping src-addr 0.0.0.0:7174``
once per device). JSON keys as ``res_cm_id_line`` prints them: ``ifindex``, ``ifname``, ``port``
(when bound to a port), ``cm-idn``, ``lqpn`` and ``qp-type`` (with a QP), ``state``, ``ps``,
``pid``, ``comm``, ``src-addr`` and ``dst-addr`` (each ``ADDR:PORT``; ``src-port``/``dst-port`` are
filter names only). Every other command (other objects, filters, ``-b``): a clear error, exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fabtune.sim.node import FABRIC_DIR, NodeState
from fabtune.sim.tools import _rdma_cm
from fabtune.sim.tools._common import err, out, state_or_host

VERSION = "6.1.0"
WILDCARD = "0.0.0.0"  # noqa: S104 (perftest's listener address: AI_PASSIVE without -F/--source_ip)


def _matches(word: str, command: str) -> bool:
    """``rd_argv_match``: the argument is a prefix of the command."""
    return bool(word) and command.startswith(word)


def _unsupported(argv: list[str]) -> int:
    err(f"rdma: {' '.join(['rdma', *argv])!r} is not supported by this emulated host "
        "(it emulates only 'rdma [-j] [-p] [-d] resource show cm_id')")
    return 1


def entries(state: NodeState, fabric_dir: Path) -> list[dict[str, Any]]:
    """The cm_ids of this host, in ``rdma -j resource show cm_id`` form (device order)."""
    host = state.node.hostname
    found = _rdma_cm.listeners(fabric_dir, host)
    rows = []
    for index, dev in enumerate(state.rdma_devices()):
        # cm-idn: the device's resource-tracker id, counted up as cm_ids are made (oldest first)
        mine = [listener for listener in found if dev in listener.devices]
        for idn, listener in enumerate(mine):
            row: dict[str, Any] = {"ifindex": index, "ifname": dev, "cm-idn": idn,
                                   "state": "LISTEN", "ps": "TCP", "pid": listener.pid}
            comm = _rdma_cm.proc_comm(listener.pid)
            if comm is not None:
                row["comm"] = comm
            row["src-addr"] = f"{WILDCARD}:{listener.port}"
            rows.append(row)
    return rows


def _text(row: dict[str, Any]) -> str:
    """One line as ``res_cm_id_line`` prints it without ``-j`` (fields end with a space)."""
    port = row.get("port", "-")
    line = f"link {row['ifname']}/{port} cm-idn {row['cm-idn']} "
    if "lqpn" in row:
        line += f"lqpn {row['lqpn']} "
    if "qp-type" in row:
        line += f"qp-type {row['qp-type']} "
    line += f"state {row['state']} ps {row['ps']} pid {row['pid']} "
    if "comm" in row:
        line += f"comm {row['comm']} "
    for key in ("src-addr", "dst-addr"):
        if key in row:
            line += f"{key} {row[key]} "
    return line


def main(argv: list[str], state: NodeState | None = None, fabric_dir: Path = FABRIC_DIR) -> int:
    """``rdma [-j] [-p] [-d] resource show cm_id``; exit 0, or 1 on anything else."""
    json_out = pretty = False
    rest = list(argv)
    while rest and rest[0].startswith("-") and len(rest[0]) > 1:
        flags = rest.pop(0)
        for flag in flags.lstrip("-") if not flags.startswith("--") else [flags[2:]]:
            if flag in ("j", "json"):
                json_out = True
            elif flag in ("p", "pretty"):
                pretty = True
            elif flag in ("d", "details"):
                continue
            elif flag in ("V", "version"):
                out(f"rdma utility, iproute2-{VERSION}")
                return 0
            else:
                return _unsupported(argv)
    words = rest + [""] * (3 - len(rest))
    if len(rest) > 3 or not (_matches(words[0], "resource")
                             and (_matches(words[1], "show") or _matches(words[1], "list"))
                             and _matches(words[2], "cm_id")):
        return _unsupported(argv)
    rows = entries(state_or_host(state), fabric_dir)
    if json_out:
        out(json.dumps(rows, indent=4) if pretty else json.dumps(rows, separators=(",", ":")))
    else:
        for row in rows:
            out(_text(row))
    return 0
