"""Emulated ``ibv_devinfo`` (rdma-core ``libibverbs/examples/devinfo.c``), default verbosity.

RoCE ``active_mtu`` follows the interface MTU as the kernel's ``iboe_get_mtu`` does: the largest
IB MTU not above ``MTU - 96`` bytes of RoCEv2 headers (1500 -> 1024, 4200 -> 4096); IB: 4096.
"""

from __future__ import annotations

import getopt

from fabtune.sim.node import NodeState
from fabtune.sim.tools._common import err, out, state_or_host

IB_MTUS = ((4096, 5), (2048, 4), (1024, 3), (512, 2), (256, 1))
ROCE_OVERHEAD = 96
STATES = {"1": "PORT_DOWN", "2": "PORT_INIT", "3": "PORT_ARMED", "4": "PORT_ACTIVE",
          "5": "PORT_ACTIVE_DEFER"}
USAGE = ("Usage: ibv_devinfo             print the ca attributes\n\n"
         "Options:\n"
         "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
         "  -i, --ib-port=<port>   use port <port> of IB device (default all ports)\n"
         "  -l, --list             print only the IB devices names\n"
         "  -v, --verbose          print all the attributes of the IB device(s)")


def active_mtu(link_layer: str, netdev_mtu: int) -> tuple[int, int]:
    """The port's active MTU and its enum value.

    Args:
        link_layer: ``InfiniBand`` or ``Ethernet``.
        netdev_mtu: The interface MTU (RoCE).

    Returns:
        ``(bytes, enum)``, e.g. ``(1024, 3)``.
    """
    if link_layer == "InfiniBand":
        return IB_MTUS[0]
    room = netdev_mtu - ROCE_OVERHEAD
    return next((m for m in IB_MTUS if m[0] <= room), IB_MTUS[-1])


def _device(state: NodeState, dev: str) -> list[str]:
    nic = state.nic(dev)
    code = state.port_attr(dev, "state").split(":")[0]
    mtu, mtu_enum = active_mtu(nic.link_layer, state.mtu(nic.netdev))
    return [
        f"hca_id:\t{dev}",
        "\ttransport:\t\t\tInfiniBand (0)",
        f"\tfw_ver:\t\t\t\t{state.device_attr(dev, 'fw_ver')}",
        f"\tnode_guid:\t\t\t{state.device_attr(dev, 'node_guid')}",
        f"\tsys_image_guid:\t\t\t{state.device_attr(dev, 'sys_image_guid')}",
        "\tvendor_id:\t\t\t0x02c9",
        f"\tvendor_part_id:\t\t\t{nic.hca_type.removeprefix('MT')}",
        "\thw_ver:\t\t\t\t0x0",
        f"\tboard_id:\t\t\t{nic.board_id}",
        "\tphys_port_cnt:\t\t\t1",
        "\t\tport:\t1",
        f"\t\t\tstate:\t\t\t{STATES.get(code, 'PORT_NOP')} ({code})",
        "\t\t\tmax_mtu:\t\t4096 (5)",
        f"\t\t\tactive_mtu:\t\t{mtu} ({mtu_enum})",
        f"\t\t\tsm_lid:\t\t\t{int(state.port_attr(dev, 'sm_lid'), 16)}",
        f"\t\t\tport_lid:\t\t{int(state.port_attr(dev, 'lid'), 16)}",
        f"\t\t\tport_lmc:\t\t0x{int(state.port_attr(dev, 'lid_mask_count')):02x}",
        f"\t\t\tlink_layer:\t\t{nic.link_layer}",
        "",
    ]


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``ibv_devinfo`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    try:
        opts, _ = getopt.gnu_getopt(argv, "d:i:lv", ["ib-dev=", "ib-port=", "list", "verbose"])
    except getopt.GetoptError as e:
        err(f"ibv_devinfo: {e.msg}")
        out(USAGE)
        return 1
    short = {"--ib-dev": "d", "--ib-port": "i", "--list": "l", "--verbose": "v"}
    values = {short.get(o, o.lstrip("-")): v for o, v in opts}
    node = state_or_host(state)
    devs = node.rdma_devices()
    if "l" in values:
        out(f"{len(devs)} HCA{'s' if len(devs) != 1 else ''} found:")
        for dev in devs:
            out(f"\t{dev}")
        return 0
    if "d" in values:
        wanted = values["d"]
        if wanted not in devs:
            err(f"IB device '{wanted}' wasn't found")
            return 255
        devs = [wanted]
    if values.get("i", "1") != "1":
        err(f"Failed to query port {values['i']} props")
        return 255
    for dev in devs:
        for line in _device(node, dev):
            out(line)
    return 0
