# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""The switch's DCBX as a host's lldpad received it: ``lldptool -t -n -i IF -V PFC`` and ``-V APP``.

openlldp prints the peer's IEEE 802.1Qaz TLVs in ``lldp_8021qaz_clif.c`` (``ieee8021qaz_print_tlv``:
the TLV's name, then its fields after a tab): the PFC TLV as ``Willing: yes|no``, ``PFC capable
traffic classes: N`` and ``PFC enabled: 3 `` (each priority followed by a space, or ``none``); the
APP TLV's DSCP entries (selector 5) gathered per priority as ``Prio:3 \\t dscp:  24, 26,`` closed
by a backspace and a space. A port whose peer sends no such TLV prints nothing (success).
"""

from __future__ import annotations

import re
from typing import Any

PFC_NAME = "IEEE 8021QAZ PFC TLV"
APP_NAME = "IEEE 8021QAZ APP TLV"
TLV_ARGS = ("PFC", "APP")
"""The ``-V`` keys to query, each with ``lldptool -t -n -i IF -V KEY``."""

_WILLING = re.compile(r"^\s*Willing:\s*(yes|no)\s*$")
_ENABLED = re.compile(r"^\s*PFC enabled:\s*(.*)$")
_DSCP_ROW = re.compile(r"^\s*Prio:([0-7])\s+dscp:(.*)$")


class LldpError(ValueError):
    """Output that is not what lldptool prints for these TLVs."""


def lldptool_argv(netdev: str, key: str) -> list[str]:
    """The neighbor query of one TLV on one port (nearest bridge, lldptool's default agent)."""
    return ["lldptool", "-t", "-n", "-i", netdev, "-V", key]


def _sections(text: str) -> dict[str, list[str]]:
    """Each TLV's lines by its printed name (the name line ends with the tab its fields start after)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.replace("\b", "").splitlines():
        line = raw.rstrip()
        head, _, rest = raw.partition("\t")
        if head.strip() in (PFC_NAME, APP_NAME):
            current = sections.setdefault(head.strip(), [])
            line = rest
        if current is not None and line.strip():
            current.append(line)
    return sections


def _pfc(lines: list[str]) -> dict[str, Any]:
    willing: bool | None = None
    enabled: list[int] | None = None
    for line in lines:
        match = _WILLING.match(line)
        if match and willing is None:
            willing = match.group(1) == "yes"
        match = _ENABLED.match(line)
        if match:
            words = match.group(1).split()
            if words != ["none"] and not all(w.isdigit() and int(w) < 8 for w in words):
                raise LldpError(f"PFC enabled: {match.group(1)!r} is not a list of priorities 0-7")
            enabled = [] if words == ["none"] else sorted({int(w) for w in words})
    if willing is None or enabled is None:
        raise LldpError(f"{PFC_NAME} without its Willing and PFC enabled lines")
    return {"willing": willing, "pfc": enabled}


def _app(lines: list[str]) -> dict[int, int]:
    dscp2prio: dict[int, int] = {}
    for line in lines:
        match = _DSCP_ROW.match(line)
        if not match:
            continue  # App# rows: other selectors (ethertype, ports), not the DSCP map
        for word in match.group(2).replace(",", " ").split():
            if not word.isdigit() or int(word) > 63:
                raise LldpError(f"APP DSCP {word!r} is not 0-63")
            dscp2prio[int(word)] = int(match.group(1))
    return dscp2prio


def parse_peer(text: str) -> dict[str, Any] | None:
    """The peer's PFC (``willing``, ``pfc``: enabled priorities) and APP DSCP map (``dscp2prio``) from
    lldptool's output of one port's neighbor TLVs; None when the peer sent no PFC TLV.

    Raises:
        LldpError: a TLV's lines that are not lldptool's.
    """
    sections = _sections(text)
    if PFC_NAME not in sections:
        return None
    peer = _pfc(sections[PFC_NAME])
    peer["dscp2prio"] = _app(sections.get(APP_NAME, []))
    return peer
