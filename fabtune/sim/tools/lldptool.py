"""Emulated openlldp: the ``lldpad`` daemon and ``lldptool`` 1.1.0 (github.com/intel/openlldp), on
hosts whose spec says lldpad runs (``tools: {lldpad: '1.1.0'}``; off by default).

The daemon (``lldpad -t``, started by the host's ``lldpad.service``) binds the abstract datagram
socket ``/com/intel/lldpad`` of the host's network namespace, as the real one does
(``include/clif_sock.h`` LLDP_CLIF_SOCK, ``ctrl_iface.c``), and answers pings with its pid
(``clif_iface_ping``: ``PONG<pid>``). Its process is named ``lldpad``, which is what mlnx_qos looks
for in ``ps -e`` before it prints its warning.

``lldptool`` follows ``lldptool.c``: it connects first (``clif_open`` in ``clif.c``), so with no
lldpad every command fails with ``perror("connect")`` and ``perror("Failed to connect to lldpad -
clif_open")`` on stderr, exit 255 (main returns -1); options come after (``request``: getopt string
``Si:tTlLhcdnvrRpqV:g:``). Emulated: ``-p`` (the daemon's pid) and ``-t -n -i IF -V TLV [-g
AGENT]``, the peer's (the emulated switch's) TLVs as the IEEE 802.1Qaz module prints them
(``lldp_8021qaz_clif.c``: ``ieee8021qaz_print_tlv`` prints the name then a tab, then
``ieee8021qaz_print_etscfg_tlv``, ``ieee8021qaz_print_pfc_tlv``, ``ieee8021qaz_print_app_tlv``; the
DSCP rows end with ``"\\b \\n"`` as printed there). The TLVs come from the switch the port is
cabled to (``fabric.json``'s ``switch``: PFC priorities, trust, DSCP map); the daemon does not
carry them. ``-V`` names looked up by the 802.1Qaz module only; an unknown name prints
``Invalid TLV identifier`` (``request``), exit 1. An interface that does not exist is
``Device not found or inactive`` (``print_cmd_response``; exit 1); one with no peer (not a RoCE
port) prints nothing (``get_neighbor_tlvs``: no frame received is success, size 0). Agents other
than the nearest bridge receive nothing from the switch (it sends to the nearest-bridge address).
Everything else (set commands, the local TLVs, stats, the TLVs of other modules) is not emulated
and says so on stderr, exit 1.

The RoCE ports' agents are taken as receiving (``adminStatus=rx`` or ``rxtx``, set once with
``lldptool -L``; lldpad's own default is disabled, ``lldp/agent.c`` ``lldp_init_agent``).

The switch: it is not willing (a switch is the configuration source); it advertises PFC on its
``pfc_priorities`` (8 PFC-capable classes, no MACsec bypass); ETS with each priority in its own
traffic class, the bandwidth split as lldptool-ets(8)'s example; and, when it trusts DSCP, APP
entries (selector 5) for its explicit DSCP map entries and for the default map's (``dscp >> 3``)
DSCPs of its PFC priorities: the DSCPs it classifies into the lossless class.
"""

from __future__ import annotations

import errno
import getopt
import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune.sim.node import FABRIC_DIR, NodeState
from fabtune.sim.tools._common import err, out, state_or_host

SOCKET = "\0/com/intel/lldpad"
"""The daemon's abstract socket (``clif_sock.h``: ``LLDP_CLIF_SOCK``, a leading NUL: abstract)."""
PING_TIMEOUT_S = 2.0
TLV_NAMES = {  # ieee8021qaz_tlv_names[]: key -> printed name
    "IEEE-DCBX": "IEEE-DCBX Settings",
    "ETS-CFG": "IEEE 8021QAZ ETS Configuration TLV",
    "ETS-REC": "IEEE 8021QAZ ETS Recommendation TLV",
    "PFC": "IEEE 8021QAZ PFC TLV",
    "APP": "IEEE 8021QAZ APP TLV",
}
TC_BW = (12, 12, 12, 12, 13, 13, 13, 13)  # lldptool-ets(8): tcbw=12,12,12,12,13,13,13,13


# ------------------------------------------------------------------------------------ the daemon


def lldpad_main(argv: list[str]) -> int:
    """``lldpad [-t]``: hold the control socket and answer pings until killed."""
    del argv
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(SOCKET)
    except OSError as e:  # another lldpad holds it
        err(f"bind: {os.strerror(e.errno or errno.EADDRINUSE)}")
        return 1
    while True:
        data, peer = sock.recvfrom(4096)
        if data[:1] == b"P" and peer:
            sock.sendto(f"R00PPONG{os.getpid()}".encode(), peer)


# ------------------------------------------------------------------------------------ lldptool


def _connect() -> socket.socket | None:
    """``clif_open``: bind our own abstract name, connect to lldpad's; None (and perror) on failure."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(f"{SOCKET}/{os.getpid()}")
        sock.connect(SOCKET)
    except OSError as e:
        sock.close()
        text = os.strerror(e.errno or errno.ECONNREFUSED)
        err(f"connect: {text}")
        err(f"Failed to connect to lldpad - clif_open: {text}")
        return None
    return sock


def _ping(sock: socket.socket) -> str | None:
    """The daemon's pid (``print_response``: the text after ``PONG``), None when it does not answer."""
    sock.settimeout(PING_TIMEOUT_S)
    try:
        sock.send(b"P")
        reply = sock.recv(4096).decode()
    except OSError:
        return None
    return reply[8:] if reply.startswith("R00PPONG") else None


def _switch(fabric_dir: Path) -> Mapping[str, Any] | None:
    """The switch the RoCE ports are cabled to (``fabric.json``), None on an InfiniBand fabric."""
    try:
        doc = json.loads((fabric_dir / "fabric.json").read_text())
    except (OSError, ValueError):
        return None
    if doc.get("fabric", "roce") != "roce":
        return None
    return dict(doc.get("switch") or {})


def app_entries(switch: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(priority, DSCP) entries the switch advertises in its APP TLV, in DSCP order."""
    if switch.get("trust", "dscp") != "dscp":
        return []
    explicit = {int(d): int(p) for d, p in dict(switch.get("dscp2prio") or {}).items()}
    lossless = {int(p) for p in switch.get("pfc_priorities") or ()}
    entries = [(p, d) for d, p in explicit.items()]
    entries += [(d >> 3, d) for d in range(64) if d not in explicit and d >> 3 in lossless]
    return sorted(entries, key=lambda e: e[1])


def _print_ets(switch: Mapping[str, Any]) -> None:
    """``ieee8021qaz_print_etscfg_tlv``: not willing, no CBS, 8 TCs, priority i in TC i."""
    del switch
    sys.stdout.write(" Willing: no\n\t CBS: not supported\n\t MAX_TCS: 8\n")
    sys.stdout.write("\t PRIO_MAP: " + "".join(f"{i}:{i} " for i in range(8)) + "\n")
    sys.stdout.write("\t TC Bandwidth: " + "".join(f"{bw}% " for bw in TC_BW) + "\n")
    sys.stdout.write("\t TSA_MAP: " + "".join(f"{i}:ets " for i in range(8)) + "\n")


def _print_pfc(switch: Mapping[str, Any]) -> None:
    """``ieee8021qaz_print_pfc_tlv``: each enabled priority followed by a space, or ``none``."""
    enabled = sorted({int(p) for p in switch.get("pfc_priorities") or ()})
    sys.stdout.write(" Willing: no\n\t MACsec Bypass Capable: no\n\t PFC capable traffic classes: 8\n")
    sys.stdout.write("\t PFC enabled: " + ("".join(f"{p} " for p in enabled) or "none") + "\n")


def _print_app(switch: Mapping[str, Any]) -> None:
    """``ieee8021qaz_print_app_tlv``: DSCP entries (selector 5) gathered per priority; the first
    row without the leading tab, each DSCP as `` %02i,``, the row closed with a backspace."""
    by_prio: dict[int, list[int]] = {}
    for prio, dscp in app_entries(switch):
        by_prio.setdefault(prio, []).append(dscp)
    first = True
    for prio in sorted(by_prio):
        sys.stdout.write(("" if first else "\t") + f"Prio:{prio} \t dscp: ")
        sys.stdout.write("".join(f" {d:02d}," for d in by_prio[prio]) + "\b \n")
        first = False


PRINTERS = {"ETS-CFG": _print_ets, "PFC": _print_pfc, "APP": _print_app}  # what the switch sends


def _neighbor(ifname: str, tlv: str, agent: str, state: NodeState, fabric_dir: Path) -> int:
    if not ifname or (not (Path("/sys/class/net") / ifname).exists() and ifname not in state.netdevs()):
        out(f"Device not found or inactive {ifname[12:]}")  # print_cmd_response (see module doc)
        return 1
    switch = _switch(fabric_dir)
    if agent != "nb" or switch is None or ifname not in state.netdevs():
        return 0  # no frame from a peer on this agent: success, nothing printed
    if tlv in PRINTERS:
        sys.stdout.write(f"{TLV_NAMES[tlv]}\n\t")
        PRINTERS[tlv](switch)
    return 0


AGENTS = {"nb": "nb", "nearestbridge": "nb", "nearest_bridge": "nb",
          "ncb": "ncb", "nearestcustomerbridge": "ncb", "nearest_customer_bridge": "ncb",
          "nntpmrb": "nntpmrb", "nearestnontpmrbridge": "nntpmrb", "nearest_nontpmr_bridge": "nntpmrb"}


class _Refused(Exception):
    """A command lldptool's ``request`` refuses: the line it prints (stdout), exit 1."""


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """``request``'s getopt loop: the options given (last value wins) and the remaining arguments."""
    try:
        opts, args = getopt.getopt(argv, "Si:tTlLhcdnvrRpqV:g:")
    except getopt.GetoptError as e:
        raise _Refused(f"missing argument for option -{e.opt}\n") from e
    values = dict(opts)
    if AGENTS.get(values.get("-g", "nb").lower()) is None:
        raise _Refused("Invalid agent specified !\n")
    tlv = values.get("-V")
    if tlv is not None and tlv.upper() not in TLV_NAMES:
        raise _Refused(f"\nInvalid TLV identifier: {tlv}")
    return values, args


def _request(sock: socket.socket, argv: list[str], state: NodeState | None, fabric_dir: Path) -> int:
    try:
        values, args = _options(argv)
    except _Refused as e:
        out(str(e))
        return 1
    flags = set(values)
    if flags == {"-p"} and not args:
        pid = _ping(sock)
        out("'P' command timed out." if pid is None else pid)
        return 1 if pid is None else 0
    if {"-t", "-n", "-V"} <= flags <= {"-t", "-n", "-i", "-V", "-g"} and not args:
        return _neighbor(values.get("-i", ""), values["-V"].upper(), AGENTS[values.get("-g", "nb").lower()],
                         state_or_host(state), fabric_dir)
    err(f"lldptool (emulated): {' '.join(argv)}: not emulated (only -p and -t -n -i IF -V TLV)")
    return 1


def main(argv: list[str], state: NodeState | None = None, fabric_dir: Path = FABRIC_DIR) -> int:
    """Run ``lldptool`` with ``argv`` (without the program name)."""
    sock = _connect()
    if sock is None:
        return 255
    with sock:
        return _request(sock, argv, state, fabric_dir)
