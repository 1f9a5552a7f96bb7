"""Parse iproute2 ``dcb ... show`` output (pfc, ets, app, buffer, maxrate, apptrust).

Layout (iproute2 ``dcb/dcb_*.c``, man dcb-*(8); formats.md §5.1): one line per parameter.
Array parameters print ``name k:v k:v ...`` (``prio-pfc 0:off ... 7:on``,
``tc-bw 0:33 1:33 ...``, ``buffer-size 0:10Kb ...``, ``tc-maxrate 0:25Gbit ...``,
``dscp-prio 0:0 CS3:2``); scalar parameters print ``name value`` and may share a line
(``pfc-cap 8 macsec-bypass off delay 4096``); ``dcb apptrust show`` prints ``order: port pcp``.
Array keys are kept as printed (``CS3`` when DSCP names are resolved) and repeated keys are
kept (an app table can map one DSCP to several priorities).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.perf.parsers._common import content_lines, fail, split_pair, to_int

TOOL = "dcb"

# A parameter name: lower case words joined by '-' (prio-pfc, reco-tc-tsa, total-size).
_KEY_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
# "order: port pcp ethtype" (dcb apptrust show)
_ORDER_RE = re.compile(r"^order:(?P<rest>.*)$")
# Sizes in dcb buffer show: "10Kb", "1Mb", "1222Kb", "512b" (print_size: bytes with K/M/G).
_SIZE_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMG]?)b$")
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class DcbShow:
    """Parameters of one or more ``dcb * show`` outputs.

    ``scalars`` maps ``pfc-cap``/``delay``/``total-size``/... to the printed value; ``arrays``
    maps ``prio-pfc``/``tc-bw``/``dscp-prio``/... to the printed ``(key, value)`` pairs in order;
    ``order`` is the apptrust order.
    """

    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    order: tuple[str, ...] | None = None

    def mapping(self, name: str) -> dict[str, str]:
        """Return an array parameter as a dict (a repeated key keeps its last value).

        Args:
            name: Parameter name such as ``prio-tc``.

        Returns:
            Key to value, as printed.

        Raises:
            KeyError: if the output has no such parameter.
        """
        return dict(self.arrays[name])

    def int_mapping(self, name: str) -> dict[int, int]:
        """Return an array parameter with integer keys and values (``prio-tc``, ``tc-bw``).

        Args:
            name: Parameter name.

        Returns:
            Integer key to integer value.

        Raises:
            KeyError: if the output has no such parameter.
            ParseError: if a key or value is not an integer.
        """
        return {to_int(TOOL, k, name): to_int(TOOL, v, name) for k, v in self.arrays[name]}

    @property
    def pfc_enabled(self) -> dict[int, bool]:
        """``prio-pfc`` as priority -> enabled (``KeyError`` if absent)."""
        return {to_int(TOOL, k, "prio-pfc"): v == "on" for k, v in self.arrays["prio-pfc"]}

    def size_bytes(self, value: str) -> int:
        """Convert a printed buffer size (``10Kb``, ``1Mb``) to bytes.

        Args:
            value: The size as printed by ``dcb buffer show``.

        Returns:
            The size in bytes.

        Raises:
            ParseError: if the value is not a size.
        """
        match = _SIZE_RE.match(value)
        if match is None:
            fail(TOOL, f"not a buffer size: {value!r} (expected e.g. '10Kb')")
        return int(float(match["num"]) * _SIZE_UNITS[match["unit"]])


def parse(text: str, *, allow_empty: bool = False) -> DcbShow:
    """Parse ``dcb <object> show dev DEV [...]`` output.

    Args:
        text: The tool's stdout (one or more show outputs).
        allow_empty: Accept empty output (``dcb app show`` of an empty table prints nothing).

    Returns:
        The parameters.

    Raises:
        ParseError: on a token that is neither a parameter name nor a ``KEY:VALUE`` pair, a
            parameter without a value, or (unless ``allow_empty``) empty output.
    """
    scalars: dict[str, str] = {}
    arrays: dict[str, tuple[tuple[str, str], ...]] = {}
    order: tuple[str, ...] | None = None
    for number, line in enumerate(content_lines(text), start=1):
        if not line.strip():
            continue
        if match := _ORDER_RE.match(line.strip()):
            order = tuple(match["rest"].split())
            continue
        _parse_line(number, line.split(), scalars, arrays)
    if not scalars and not arrays and order is None and not allow_empty:
        fail(TOOL, "no parameter found (expected lines like 'prio-pfc 0:off 1:off ...')")
    return DcbShow(scalars=scalars, arrays=arrays, order=order)


def _parse_line(
    number: int,
    tokens: list[str],
    scalars: dict[str, str],
    arrays: dict[str, tuple[tuple[str, str], ...]],
) -> None:
    index = 0
    while index < len(tokens):
        key = tokens[index]
        if not _KEY_RE.match(key):
            fail(TOOL, f"line {number}: expected a parameter name, got {key!r}")
        values = _pairs_after(tokens, index + 1)
        if values:
            arrays[key] = tuple(split_pair(TOOL, t) for t in values)
            index += 1 + len(values)
        elif index + 1 < len(tokens):
            scalars[key] = tokens[index + 1]
            index += 2
        else:
            fail(TOOL, f"line {number}: parameter {key!r} has no value")


def _pairs_after(tokens: list[str], start: int) -> list[str]:
    pairs: list[str] = []
    for token in tokens[start:]:
        if ":" not in token:
            break
        pairs.append(token)
    return pairs
