"""The tool-output parsers the controller shares with the hosts (module_utils ``fabric_formats``).

One parser per format: ``fabric_formats.py`` of the collection, which the hosts' modules import as
module_utils, loaded here from the same file (:func:`fabtune.collection.module_util`). Its records
and functions are named here with their types (mypy reads the collection's file under its
collection name); :func:`parsed` raises a parser's ``FormatError`` again as ``ParseError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fabtune.collection import module_util
from fabtune.errors import ParseError

if TYPE_CHECKING:
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_formats import (
        FormatError,
        MlnxQos,
        MlnxQosTc,
        TopoMatrix,
        opensm_conf_lines,
        parse_mlnx_qos,
        parse_nccl_conf,
        parse_opensm_conf,
        parse_topo,
    )
else:
    _formats = module_util("fabric_formats")
    FormatError = _formats.FormatError
    MlnxQos, MlnxQosTc, TopoMatrix = _formats.MlnxQos, _formats.MlnxQosTc, _formats.TopoMatrix
    parse_mlnx_qos, parse_topo = _formats.parse_mlnx_qos, _formats.parse_topo
    parse_nccl_conf = _formats.parse_nccl_conf
    opensm_conf_lines, parse_opensm_conf = _formats.opensm_conf_lines, _formats.parse_opensm_conf

__all__ = [
    "MlnxQos", "MlnxQosTc", "TopoMatrix", "opensm_conf_lines", "parse_mlnx_qos", "parse_nccl_conf",
    "parse_opensm_conf", "parse_topo", "parsed",
]

Record = TypeVar("Record")


def parsed(parse: Callable[[str], Record], text: str) -> Record:
    """``parse(text)``, its ``FormatError`` raised as ``ParseError`` (same message: tool and what)."""
    try:
        return parse(text)
    except FormatError as err:
        raise ParseError(str(err)) from err
