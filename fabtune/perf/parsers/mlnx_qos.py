"""Parse ``mlnx_qos -i <if>`` output (Mellanox/mlnx-tools ``pretty_print``; formats.md §4.2).

The parser is the collection's (module_utils ``fabric_formats.parse_mlnx_qos``), the one the hosts'
``fabric_qos`` and ``fabric_facts`` read the port's QoS with; here its errors are ``ParseError``.
"""

from __future__ import annotations

from fabtune.formats import MlnxQos, MlnxQosTc, parse_mlnx_qos, parsed

TOOL = "mlnx_qos"
__all__ = ["TOOL", "MlnxQos", "MlnxQosTc", "parse"]


def parse(text: str) -> MlnxQos:
    """Parse mlnx_qos output (sections it lacks are None/empty).

    Raises:
        ParseError: if no mlnx_qos section is recognised, or a PFC row does not have eight
            columns, or a ``priority:`` line comes before any ``tc:`` line.
    """
    return parsed(parse_mlnx_qos, text)
