"""Emulated ``ethtool`` for the emulated mlx5 ports: ``-S IF``, ``-i IF`` and ``IF`` (link).

Errors as ethtool prints them: a bad command line is ``ethtool: bad command line argument(s)``
plus the help hint (exit 1); an interface that is not an emulated NIC fails the ioctl with
``No such device`` (``-i``: exit 71, ``-S``: exit 94, plain: exit 75).
"""

from __future__ import annotations

from fabtune.sim.node import NodeState
from fabtune.sim.tools._common import err, out, state_or_host

BAD = ("ethtool: bad command line argument(s)\n"
       "For more information run ethtool -h")


def _stats(node: NodeState, netdev: str) -> int:
    out("NIC statistics:")
    for name, value in node.ethtool_stats(netdev).items():
        out(f"     {name}: {value}")
    return 0


def _driver(node: NodeState, netdev: str) -> int:
    nic = node.nic(netdev)
    out("driver: mlx5_core[ib_ipoib]" if nic.is_ib else "driver: mlx5_core")
    out("version: 24.10-1.1.4")
    out(f"firmware-version: {nic.fw} ({nic.board_id})")
    out("expansion-rom-version: ")
    out(f"bus-info: {nic.bus_id}")
    out("supports-statistics: yes")
    out("supports-test: yes")
    out("supports-eeprom-access: no")
    out("supports-register-dump: no")
    out("supports-priv-flags: yes")
    return 0


def _link(node: NodeState, netdev: str) -> int:
    # The speed the port trained at (``rate_gbps``: lower than the rack's on a port whose spec has a
    # ``link_speed``), in Mb/s as ethtool prints the ksettings' base.speed ("\tSpeed: %uMb/s",
    # ethtool netlink/settings.c; "Unknown!" with no link), e.g. ``Speed: 200000Mb/s``.
    nic = node.nic(netdev)
    up = node.operstate(netdev) == "up"
    out(f"Settings for {netdev}:")
    out(f"\tSpeed: {nic.rate_gbps * 1000 if up else 'Unknown!'}{'Mb/s' if up else ''}")
    out(f"\tDuplex: {'Full' if up else 'Unknown! (255)'}")
    out("\tAuto-negotiation: on")
    out("\tPort: Direct Attach Copper")
    out(f"\tLink detected: {'yes' if up else 'no'}")
    return 0


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``ethtool`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    modes = {"-S": (_stats, "Cannot get stats strings information", 94),
             "--statistics": (_stats, "Cannot get stats strings information", 94),
             "-i": (_driver, "Cannot get driver information", 71),
             "--driver": (_driver, "Cannot get driver information", 71)}
    if len(argv) == 1 and not argv[0].startswith("-"):
        handler, failure, code = _link, "Cannot get device settings", 75
        netdev = argv[0]
    elif len(argv) == 2 and argv[0] in modes:
        handler, failure, code = modes[argv[0]]
        netdev = argv[1]
    else:
        err(BAD)
        return 1
    node = state_or_host(state)
    if netdev not in node.netdevs():
        err(f"{failure}: No such device")
        return code
    return handler(node, netdev)
