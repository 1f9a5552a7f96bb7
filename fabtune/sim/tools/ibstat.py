"""Emulated ``ibstat`` (rdma-core infiniband-diags ``ibstat.c``) and ``ibstatus`` (shell script).

``ibstat [-l|-s|-p] [ca_name] [portnum]``: tab-indented CA and port blocks; a missing CA ends in
``ibpanic: [PID] main: stat of IB device 'X' failed: No such file or directory`` and exit 255.
``ibstatus [dev[:port]]...``: raw sysfs values per port.
"""

from __future__ import annotations

import getopt

from fabtune.sim.node import NodeState, NoSuchDeviceError
from fabtune.sim.tools import process_pid
from fabtune.sim.tools._common import err, out, state_or_host

PORT_STATES = {"1": "Down", "2": "Initializing", "3": "Armed", "4": "Active", "5": "Active Defer"}
PHYS_STATES = {"1": "Sleep", "2": "Polling", "3": "Disabled", "4": "PortConfigurationTraining",
               "5": "LinkUp", "6": "LinkErrorRecovery", "7": "PhyTest"}
USAGE = ("Usage: ibstat [options] <ca_name> [portnum]\n\n"
         "Options:\n"
         "  --list_of_cas, -l       list all IB devices\n"
         "  --short, -s             short output\n"
         "  --port_list, -p         show port list\n"
         "  --help, -h              help message\n\n"
         "Examples:\n"
         "  ibstat                  # display status of all ports on all IB devices\n"
         "  ibstat -l               # list all IB devices\n"
         "  ibstat -p               # show port guids\n"
         "  ibstat mthca0 2         # show status of port 2 of 'mthca0'\n")


def _panic(ca: str) -> int:
    err(f"ibpanic: [{process_pid()}] main: stat of IB device '{ca}' failed: "
        "No such file or directory")
    return 255


def _port_lines(state: NodeState, dev: str, alone: bool) -> list[str]:
    nic = state.nic(dev)
    pre, hdr = ("", "") if alone else ("\t\t", "\t")
    code = state.port_attr(dev, "state").split(":")[0]
    phys = state.port_attr(dev, "phys_state").split(":")[0]
    rate = state.port_attr(dev, "rate").split()[0]
    cap = int(state.port_attr(dev, "cap_mask"), 16)
    return [
        f"{hdr}Port 1:",
        f"{pre}State: {PORT_STATES.get(code, 'Unknown')}",
        f"{pre}Physical state: {PHYS_STATES.get(phys, 'Unknown')}",
        f"{pre}Rate: {rate}",
        f"{pre}Base lid: {int(state.port_attr(dev, 'lid'), 16)}",
        f"{pre}LMC: {state.port_attr(dev, 'lid_mask_count')}",
        f"{pre}SM lid: {int(state.port_attr(dev, 'sm_lid'), 16)}",
        f"{pre}Capability mask: 0x{cap:08x}",
        f"{pre}Port GUID: 0x{nic.port_guid:016x}",
        f"{pre}Link layer: {state.port_attr(dev, 'link_layer')}",
    ]


def _ca_lines(state: NodeState, dev: str, short: bool) -> list[str]:
    nic = state.nic(dev)
    lines = [
        f"CA '{dev}'",
        f"\tCA type: {state.device_attr(dev, 'hca_type')}",
        "\tNumber of ports: 1",
        f"\tFirmware version: {state.device_attr(dev, 'fw_ver')}",
        f"\tHardware version: {state.device_attr(dev, 'hw_rev')}",
        f"\tNode GUID: 0x{nic.guid:016x}",
        f"\tSystem image GUID: 0x{nic.guid:016x}",
    ]
    return lines if short else lines + _port_lines(state, dev, alone=False)


def _show(node: NodeState, flags: set[str], args: list[str]) -> int:
    devs = node.rdma_devices()
    if args:
        if args[0] not in devs:
            return _panic(args[0])
        devs = [args[0]]
    if len(args) > 1 and args[1] != "1":  # ca_stat(): warns, and main() still exits 0
        err(f"ibwarn: [{process_pid()}] ca_stat: CA: '{args[0]}' has no port number {args[1]} - max (1)")
        err(f"ibwarn: [{process_pid()}] main: stat of IB device '{args[0]}' failed")
        return 0
    if flags & {"-p", "--port_list"}:
        lines = [f"0x{node.nic(dev).port_guid:016x}" for dev in devs]
    elif len(args) > 1:  # the node type and name, then the port alone (ca_stat() in ibstat.c)
        lines = [f"CA: '{devs[0]}'", *_port_lines(node, devs[0], alone=True)]
    else:
        short = bool(flags & {"-s", "--short"})
        lines = [line for dev in devs for line in _ca_lines(node, dev, short)]
    for line in lines:
        out(line)
    return 0


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``ibstat`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    try:
        opts, args = getopt.gnu_getopt(argv, "lsphV", ["list_of_cas", "short", "port_list",
                                                       "help", "version"])
    except getopt.GetoptError as e:
        err(f"ibstat: {e.msg}")
        err(USAGE)
        return 2
    flags = {o for o, _ in opts}
    if flags & {"-h", "--help"}:
        err(USAGE)
        return 2
    node = state_or_host(state)
    if flags & {"-l", "--list_of_cas"}:
        for dev in node.rdma_devices():
            out(dev)
        return 0
    return _show(node, flags, args)


def ibstatus_main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``ibstatus`` with ``argv`` (``[devname[:port]]...``).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    if argv and argv[0] in ("-h", "--help"):
        out("Usage: ibstatus [devname[:port]]")
        return 0
    node = state_or_host(state)
    targets = [(a.split(":")[0], a.split(":")[1] if ":" in a else "1") for a in argv] or [
        (dev, "1") for dev in node.rdma_devices()]
    for dev, port in targets:
        try:
            gid = node.gid_table(dev, int(port) if port.isdigit() else -1)[0].gid
        except NoSuchDeviceError:
            out(f"Fatal error:  device '{dev}' port '{port}': sys files not found "
                f"(/sys/class/infiniband/{dev}/ports/{port})")
            return 255
        out(f"Infiniband device '{dev}' port {port} status:")
        out(f"\tdefault gid:\t {gid}")
        out(f"\tbase lid:\t {node.port_attr(dev, 'lid')}")
        out(f"\tsm lid:\t\t {node.port_attr(dev, 'sm_lid')}")
        out(f"\tstate:\t\t {node.port_attr(dev, 'state')}")
        out(f"\tphys state:\t {node.port_attr(dev, 'phys_state')}")
        out(f"\trate:\t\t {node.port_attr(dev, 'rate')}")
        out(f"\tlink_layer:\t {node.port_attr(dev, 'link_layer')}")
        out()
    return 0
