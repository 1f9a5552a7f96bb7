"""Emulated ``sminfo`` (infiniband-diags): the master SM of the IB subnet.

Reads the SM record ``emu/sm.json``:
``{"lid": 1, "guid": "0x...", "activity": 123, "priority": 15, "state": 3}``, or else the master
record the emulated opensm (``fabtune.sim.opensm``) publishes for the whole subnet as
``sminfo.json`` in the shared fabric directory. Without either (no SM running, its daemon gone,
or a RoCE node) the query fails: ``sminfo: iberror: failed: query`` and exit 255.
"""

from __future__ import annotations

import getopt
from pathlib import Path

from fabtune.sim import opensm
from fabtune.sim.node import FABRIC_DIR, NodeState
from fabtune.sim.tools._common import err, out, state_or_host

STATES = ("SMINFO_NOTACT", "SMINFO_DISCOVER", "SMINFO_STANDBY", "SMINFO_MASTER")
USAGE = "Usage: sminfo [options] <sm_lid|sm_dr_path> [modifier]"


def main(argv: list[str], state: NodeState | None = None, fabric_dir: Path | None = None) -> int:
    """Run ``sminfo`` with ``argv`` (without the program name).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).
        fabric_dir: The shared fabric directory holding the master SM's record (default: this
            host's ``/var/lib/fabtune-fabric``; none when only ``state`` is given).

    Returns:
        The exit status.
    """
    try:
        getopt.gnu_getopt(argv, "sC:P:dDGLeuvVht:y:", ["Ca=", "Port=", "timeout="])
    except getopt.GetoptError as e:
        err(f"sminfo: {e.msg}")
        err(USAGE)
        return 2
    node = state_or_host(state)
    info = node.sm_info()
    if info is None:
        shared = fabric_dir if fabric_dir is not None or state is not None else FABRIC_DIR
        info = None if shared is None else opensm.master(shared)
    if info is None or node.node.fabric != "ib":
        err("sminfo: iberror: failed: query")
        return 255
    sm_state = int(info.get("state", 3))
    name = STATES[sm_state] if 0 <= sm_state < len(STATES) else "UNKNOWN"
    out(f"sminfo: sm lid {int(info['lid'])} sm guid 0x{int(str(info['guid']), 16):x}, "
        f"activity count {int(info.get('activity', 0))} priority {int(info.get('priority', 0))} "
        f"state {sm_state} {name}")
    return 0
