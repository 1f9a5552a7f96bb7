"""Emulated ``ibdev2netdev`` (MLNX_OFED ofed-scripts): one ``DEV port N ==> NETDEV (Up)`` line.

Devices are listed as ``ls /sys/class/infiniband`` orders them (``mlx5_0, mlx5_1, mlx5_10``).
``-v`` adds the PCI address, board and firmware (format from the OFED script; no public sample).
"""

from __future__ import annotations

from fabtune.sim.node import NodeState
from fabtune.sim.tools._common import err, out, state_or_host

USAGE = "Usage: ibdev2netdev [-v] [-h]"


def _line(state: NodeState, dev: str, verbose: bool) -> str:
    nic = state.nic(dev)
    link = "Up" if state.operstate(nic.netdev) == "up" else "Down"
    if not verbose:
        return f"{dev} port 1 ==> {nic.netdev} ({link})"
    port_state = state.port_attr(dev, "state").split(":")[-1].strip()
    return (f"{nic.bus_id} {dev} ({nic.hca_type} - {nic.board_id}) fw {nic.fw} "
            f"port 1 ({port_state}) ==> {nic.netdev} ({link})")


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``ibdev2netdev`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    verbose = False
    for arg in argv:
        if arg == "-v":
            verbose = True
        elif arg == "-h":
            out(USAGE)
            return 0
        else:
            err(USAGE)
            return 1
    node = state_or_host(state)
    for dev in node.rdma_devices():
        out(_line(node, dev, verbose))
    return 0
