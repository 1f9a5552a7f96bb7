"""Emulated ``cma_roce_tos`` and ``cma_roce_mode`` (mlnx-tools ``sbin/``, bash getopts).

Both print the configfs file after an optional write (``cat default_roce_tos`` /
``default_roce_mode``) and exit 0; errors print the script's message on stdout and exit 1.
"""

from __future__ import annotations

import getopt
import os

from fabtune.sim.node import NodeState, NoSuchDeviceError
from fabtune.sim.tools._common import err, out, state_or_host

MODE_USAGE = """Set/Show RoCE default mode of RDMA_CM applications

Usage:
\tcma_roce_mode OPTIONS
Options:
\t-h              show this help
\t-d <dev>        use IB device <dev> (default mlx5_0)
\t-p <port>       use port <port> of IB device (default 1)
\t-m <roce_mode>  set RoCE mode of RDMA_CM applications (1 or 2)"""
TOS_USAGE = """Set/Show RoCE default TOS of RDMA_CM applications

Usage:
\tcma_roce_tos OPTIONS
Options:
\t-h              show this help
\t-d <dev>        use IB device <dev> (default mlx5_0)
\t-p <port>       use port <port> of IB device (default 1)
\t-t <TOS>        set TOS of RoCE RDMA_CM applications (0)"""


def _common(prog: str, argv: list[str], letters: str,
            usage: str) -> tuple[dict[str, str], int | None]:
    try:
        opts, _ = getopt.getopt(argv, letters)
    except getopt.GetoptError as e:
        err(f"{prog}: illegal option -- {e.opt}")
        opts = []
    values = {o[1]: v for o, v in opts}
    if "h" in values:
        out(usage)
        return values, 0
    if os.geteuid() != 0:
        out("You must be root to run this")
        return values, 1
    return values, None


def _port(node: NodeState, dev: str, port: str) -> int | None:
    if dev not in node.rdma_devices():
        out(f"Failed to create configuration for {dev}")
        return 1
    try:
        node.get_roce_mode(dev, int(port) if port.isdigit() else -1)
    except NoSuchDeviceError:
        out(f"Device {dev} port {port} does not exist")
        return 1
    return None


def mode_main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``cma_roce_mode`` with ``argv``.

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    values, code = _common("cma_roce_mode", argv, "d:m:hp:", MODE_USAGE)
    if code is not None:
        return code
    node = state_or_host(state)
    dev, port = values.get("d", "mlx5_0"), values.get("p", "1")
    failed = _port(node, dev, port)
    if failed is not None:
        return failed
    mode = values.get("m", "0")
    if not mode.lstrip("-").isdigit():
        err(f"/usr/sbin/cma_roce_mode: line 95: [: {mode}: integer expression expected")
    elif int(mode) in (1, 2):
        node.set_roce_mode(dev, int(mode), int(port))
    out(node.get_roce_mode(dev, int(port)))
    return 0


def tos_main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``cma_roce_tos`` with ``argv``.

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    values, code = _common("cma_roce_tos", argv, "d:t:hp:", TOS_USAGE)
    if code is not None:
        return code
    node = state_or_host(state)
    dev, port = values.get("d", "mlx5_0"), values.get("p", "1")
    failed = _port(node, dev, port)
    if failed is not None:
        return failed
    if "t" in values:
        tos = values["t"]
        if not tos.isdigit() or int(tos) > 255:
            err("/usr/sbin/cma_roce_tos: line 100: echo: write error: Invalid argument")
        else:
            node.set_roce_tos(dev, int(tos), int(port))
    out(str(node.get_roce_tos(dev, int(port))))
    return 0
