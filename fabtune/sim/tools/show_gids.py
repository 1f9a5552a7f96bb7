"""Emulated ``show_gids`` (mlnx-tools ``sbin/show_gids``, bash, ``echo -e`` output).

Walks ``/sys/class/infiniband/DEV/ports/P/gids/`` in ``ls`` order, skips all-zero and bare
``fe80::`` GIDs, prints IPv4-mapped GIDs with their address, and ends with ``n_gids_found=N``.
An unknown device name prints no rows (the script's ``ls`` finds nothing).
"""

from __future__ import annotations

import re

from fabtune.sim.node import ZERO_GID, NodeState, NoSuchDeviceError
from fabtune.sim.tools._common import out, state_or_host

HEADER = "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV"
RULE = "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"
BARE_LINK_LOCAL = "fe80:0000:0000:0000:0000:0000:0000:0000"


def _ipv4(gid: str) -> str:
    """The script's ``printf "%d.%d.%d.%d" 0x${gid:30:2} ...``."""
    return ".".join(str(int(gid[i:i + 2], 16)) for i in (30, 32, 35, 37))


def _rows(state: NodeState, dev: str) -> list[str]:
    try:
        table = state.gid_table(dev)
    except NoSuchDeviceError:
        return []
    rows = []
    for entry in sorted(table, key=lambda g: str(g.index)):
        if entry.gid in (ZERO_GID, BARE_LINK_LOCAL):
            continue
        match = re.search(r"[Vv].*", entry.type)
        vtype = match.group(0) if match else ""
        ndev = entry.ndev or ""
        if entry.gid.split(":")[0] == "0000":
            rows.append(f"{dev}\t1\t{entry.index}\t{entry.gid}\t{_ipv4(entry.gid)}  \t"
                        f"{vtype}\t{ndev}")
        else:
            rows.append(f"{dev}\t1\t{entry.index}\t{entry.gid}\t\t\t{vtype}\t{ndev}")
    return rows


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``show_gids`` with ``argv`` (optional device names).

    Args:
        argv: Command-line arguments (the first is a device list, as in the script).
        state: The node state (default: this host's).

    Returns:
        The exit status (always 0, like the script).
    """
    node = state_or_host(state)
    out(HEADER)
    out(RULE)
    devs = argv[0].split() if argv and argv[0] else node.rdma_devices()
    count = 0
    for dev in devs:
        for row in _rows(node, dev):
            out(row)
            count += 1
    out(f"n_gids_found={count}")
    return 0
