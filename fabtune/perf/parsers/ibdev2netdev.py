"""Parse ``ibdev2netdev`` (MLNX_OFED ofed-scripts; formats.md §6.6).

One line per (device, port): ``mlx5_0 port 1 ==> ib0 (Up)``. Copies piped through ``column -t``
(extra spaces) and with trailing ``# comments`` are accepted; lines without ``==>`` (a shell
prompt) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabtune.perf.parsers._common import content_lines, fail

TOOL = "ibdev2netdev"

# "mlx5_0 port 1 ==> ib0 (Up)" [+ "  # comment" in annotated copies]
_LINE_RE = re.compile(
    r"^\s*(?P<dev>\S+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>Up|Down)\)"
    r"\s*(?:#.*)?$"
)


@dataclass(frozen=True)
class IbDevNetDev:
    """One device/port to netdev mapping."""

    device: str
    port: int
    netdev: str
    up: bool


@dataclass(frozen=True)
class IbDev2NetDev:
    """All mappings, in printed order."""

    entries: tuple[IbDevNetDev, ...]

    def netdev_of(self, device: str, port: int = 1) -> str:
        """Return the netdev of an RDMA device port.

        Args:
            device: RDMA device name (``mlx5_0``).
            port: Port number.

        Returns:
            The netdev name.

        Raises:
            KeyError: if the device/port is not listed.
        """
        for entry in self.entries:
            if entry.device == device and entry.port == port:
                return entry.netdev
        raise KeyError(f"{device} port {port} is not listed")


def parse(text: str) -> IbDev2NetDev:
    """Parse ibdev2netdev output.

    Args:
        text: The script's stdout.

    Returns:
        The mappings.

    Raises:
        ParseError: if a ``==>`` line is malformed or no mapping is found.
    """
    entries: list[IbDevNetDev] = []
    for number, line in enumerate(content_lines(text), start=1):
        if "==>" not in line:
            continue
        match = _LINE_RE.match(line)
        if match is None:
            fail(TOOL, f"line {number}: expected 'DEV port N ==> NETDEV (Up|Down)', got "
                       f"{line.strip()!r}")
        entries.append(
            IbDevNetDev(match["dev"], int(match["port"]), match["netdev"], match["state"] == "Up")
        )
    if not entries:
        fail(TOOL, "no mapping found (expected lines like 'mlx5_0 port 1 ==> ib0 (Up)')")
    return IbDev2NetDev(entries=tuple(entries))
