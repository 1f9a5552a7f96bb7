"""Parse ``show_gids`` (mlnx-tools ``sbin/show_gids``; formats.md §6.5).

Header ``DEV PORT INDEX GID IPv4 VER DEV`` and a dashed line, then TAB-separated rows
``mlx5_0 1 3 0000:...:ffff:c0a8:d3f2 192.168.211.242 v2 rdma0`` (IPv4 only for IPv4-mapped GIDs;
the netdev may be empty), then ``n_gids_found=<n>``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from fabtune.perf.parsers._common import content_lines, fail

TOOL = "show_gids"

_HEADER_RE = re.compile(r"^DEV\s+PORT\s+INDEX\s+GID\b")
_DASHES_RE = re.compile(r"^-+\s+-+\s+-+")
# A GID in the 8-group form printed from sysfs (fe80:0000:...:03da).
_GID_RE = re.compile(r"^[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}$")
_ROW_RE = re.compile(r"^(?P<dev>\S+)\s+(?P<port>\d+)\s+(?P<index>\d+)\s+(?P<rest>.*)$")
_FOOTER_RE = re.compile(r"^n_gids_found=(?P<count>\d+)\s*$")
_VERSIONS = ("v1", "v2")


@dataclass(frozen=True)
class GidEntry:
    """One GID table entry; ``version`` is ``v1`` (RoCE v1/IB) or ``v2`` (RoCE v2)."""

    device: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    version: str
    netdev: str | None


@dataclass(frozen=True)
class ShowGids:
    """All rows of show_gids output."""

    entries: tuple[GidEntry, ...]
    n_gids_found: int | None = None

    def find(self, device: str, *, version: str = "v2", ipv4: bool = True) -> GidEntry | None:
        """Return the first GID of a device with the given RoCE version (and IPv4, if asked).

        Args:
            device: RDMA device name (``mlx5_0``).
            version: ``v1`` or ``v2``.
            ipv4: Require an IPv4-mapped GID.

        Returns:
            The entry, or None if there is none (e.g. no IPv4 on the netdev).
        """
        for entry in self.entries:
            wanted = entry.device == device and entry.version == version
            if wanted and (not ipv4 or entry.ipv4 is not None):
                return entry
        return None


def parse(text: str) -> ShowGids:
    """Parse show_gids output.

    Args:
        text: The script's stdout.

    Returns:
        The GID table.

    Raises:
        ParseError: on a malformed row, when no row is found, or when the
            ``n_gids_found`` footer disagrees with the number of rows (truncated output).
    """
    entries: list[GidEntry] = []
    footer: int | None = None
    for number, line in enumerate(content_lines(text), start=1):
        if not line.strip() or _HEADER_RE.match(line) or _DASHES_RE.match(line):
            continue
        if match := _FOOTER_RE.match(line):
            footer = int(match["count"])
        else:
            entries.append(_row(number, line))
    if footer is None and not entries:
        fail(TOOL, "no GID rows found (expected 'DEV PORT INDEX GID ...' rows)")
    if footer is not None and footer != len(entries):
        fail(TOOL, f"n_gids_found={footer} but {len(entries)} rows were read (truncated?)")
    return ShowGids(entries=tuple(entries), n_gids_found=footer)


def _row(number: int, line: str) -> GidEntry:
    match = _ROW_RE.match(line)
    tokens = match["rest"].split() if match else []
    if match is None or not tokens or not _GID_RE.match(tokens[0]):
        fail(TOOL, f"line {number}: expected 'DEV PORT INDEX GID [IPv4] VER [NETDEV]', got "
                   f"{line.strip()!r}")
    gid, rest = tokens[0], tokens[1:]
    ipv4 = rest.pop(0) if rest and _is_ipv4(rest[0]) else None
    if not rest or rest[0] not in _VERSIONS or len(rest) > 2:
        fail(TOOL, f"line {number}: expected VER (v1|v2) [NETDEV] after the GID: {line.strip()!r}")
    return GidEntry(
        device=match["dev"],
        port=int(match["port"]),
        index=int(match["index"]),
        gid=gid,
        ipv4=ipv4,
        version=rest[0],
        netdev=rest[1] if len(rest) == 2 else None,
    )


def _is_ipv4(token: str) -> bool:
    try:
        ipaddress.IPv4Address(token)
    except ValueError:
        return False
    return True
