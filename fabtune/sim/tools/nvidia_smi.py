"""Emulated ``nvidia-smi``: ``topo -m`` (TAB-separated matrix, Legend, NIC Legend) and ``-L``.

Distances come from ``node.json``: NVLink between GPUs when ``nvlink`` is set (``NV18``), else
PCIe; a GPU and a NIC on one PCIe switch are ``PIX`` (``PXB`` behind extra bridges), on one NUMA
node ``NODE``, across sockets ``SYS``. Any other command line gets nvidia-smi's usage error.
"""

from __future__ import annotations

import uuid

from fabtune.sim.node import NodeDescription, NodeState, pcie_distance
from fabtune.sim.tools._common import out, state_or_host

LEGEND = (
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
    "(e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
    "Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."


def _endpoints(node: NodeDescription) -> list[tuple[str, int, int, int, bool]]:
    """(label, numa, pcie_switch, bridges, is_gpu) for every GPU then every NIC."""
    ends = [(f"GPU{g.index}", g.numa, g.pcie_switch, 1, True) for g in node.gpus]
    ends += [(f"NIC{i}", n.numa, n.pcie_switch, n.bridges, False)
             for i, n in enumerate(node.nics)]
    return ends


def _cell(node: NodeDescription, a: tuple[str, int, int, int, bool],
          b: tuple[str, int, int, int, bool]) -> str:
    if a[0] == b[0]:
        return " X "
    if a[4] and b[4] and node.nvlink:
        return node.nvlink
    return pcie_distance(a[1], a[2], b[1], b[2], max(a[3], b[3]))


def topo_matrix(node: NodeDescription) -> list[str]:
    """The ``nvidia-smi topo -m`` lines for a node.

    Args:
        node: The node description.

    Returns:
        Output lines without newlines.
    """
    ends = _endpoints(node)
    lines = ["\t" + "\t".join(e[0] for e in ends) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in ends:
        cells = "\t".join(_cell(node, a, b) for b in ends)
        tail = f"\t{node.cpu_affinity(a[1])}\t{a[1]}\t\tN/A" if a[4] else "\t\t\t\t"
        lines.append(f"{a[0]}\t{cells}{tail}")
    lines += ["", *LEGEND]
    if node.nics:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  NIC{i}: {n.dev}" for i, n in enumerate(node.nics)]
    return lines


def gpu_uuid(hostname: str, index: int) -> str:
    """A stable GPU UUID for an emulated GPU (``GPU-xxxxxxxx-...``)."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{hostname}.gpu{index}.fabtune"))


def main(argv: list[str], state: NodeState | None = None) -> int:
    """Run ``nvidia-smi`` with ``argv`` (``topo -m`` or ``-L``).

    Args:
        argv: Command-line arguments.
        state: The node state (default: this host's).

    Returns:
        The exit status.
    """
    if argv in (["topo", "-m"], ["topo", "--matrix"]):
        for line in topo_matrix(state_or_host(state).node):
            out(line)
        return 0
    if argv in (["-L"], ["--list-gpus"]):
        node = state_or_host(state).node
        for gpu in node.gpus:
            out(f"GPU {gpu.index}: {gpu.model} (UUID: {gpu_uuid(node.hostname, gpu.index)})")
        return 0
    out(BAD_ARGS)
    return 2
