"""Parse ``nvidia-smi topo -m``: the GPU/NIC distance matrix and the NIC legend (formats.md §8).

The parser is the collection's (module_utils ``fabric_formats.parse_topo``), the one the hosts'
``fabric_facts`` reads the topology with; here its errors are ``ParseError``.
"""

from __future__ import annotations

from fabtune.formats import TopoMatrix, parse_topo, parsed

TOOL = "topo"
__all__ = ["TOOL", "TopoMatrix", "parse"]


def parse(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (a shell prompt line before the header is ignored).

    Raises:
        ParseError: without a header row, without rows, or on a short or unknown cell.
    """
    return parsed(parse_topo, text)
