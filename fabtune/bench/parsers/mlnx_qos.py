"""Parse ``mlnx_qos -i <if>`` output (Mellanox/mlnx-tools ``pretty_print``; formats.md §4.2).

Sections: ``DCBX mode:``, ``Priority trust state:``, ``dscp2prio mapping:`` with
``\\tprio:0 dscp:07,06,...,`` lines, ``Receive buffer size (bytes): a,b,...,max_buffer_size=N``,
``Cable len:``, ``PFC configuration:`` with ``priority``/``enabled``/``buffer`` rows of eight
columns, and per traffic class ``tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%`` followed by
``\\t priority:  0`` lines. Indentation is not relied upon, so copies whose whitespace was
collapsed (cnblogs fixture) parse the same. Lines of other programs are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.bench.parsers._common import content_lines, fail, to_float, to_int

TOOL = "mlnx_qos"

_DCBX_RE = re.compile(r"^\s*DCBX mode:\s*(?P<mode>.+?)\s*$")
_TRUST_RE = re.compile(r"^\s*Priority trust state:\s*(?P<trust>\S+)\s*$")
# "\tprio:0 dscp:07,06,05,04,03,02,01,00," ('%02d,' per DSCP, wrapped every 8 values)
_DSCP2PRIO_RE = re.compile(r"^\s*(?:prio:(?P<prio>\d+)\s+)?dscp:(?P<dscps>[\d,]*)\s*$")
# "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016"
_BUFFER_RE = re.compile(r"^\s*Receive buffer size \(bytes\):\s*(?P<sizes>\S+)\s*$")
_CABLE_RE = re.compile(r"^\s*Cable len:\s*(?P<len>\d+)\s*$")
# "\tpriority    0   1   2   3   4   5   6   7" / "\tenabled ..." / "\tbuffer ..."
_PFC_ROW_RE = re.compile(r"^\s*(?P<name>priority|enabled|buffer)(?P<values>(?:\s+\d+)+)\s*$")
# "tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%" ("%.1f Gbps" when limited; bw only for ets)
_TC_RE = re.compile(
    r"^\s*tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?P<rate>unlimited|[\d.]+\s*Gbps)\s*,"
    r"\s*tsa:\s*(?P<tsa>\w+)(?:\s*,\s*bw:\s*(?P<bw>\S+))?\s*$"
)
# "\t priority:  0"
_TC_PRIO_RE = re.compile(r"^\s*priority:\s*(?P<prio>\d+)\s*$")

_PRIORITIES = 8


@dataclass(frozen=True)
class MlnxQosTc:
    """One traffic class: rate limit (None = unlimited), TSA, ETS share and its priorities."""

    tc: int
    ratelimit_gbps: float | None
    tsa: str
    bw_percent: int | None
    priorities: tuple[int, ...] = ()


@dataclass(frozen=True)
class MlnxQos:
    """The state printed by mlnx_qos; sections the output lacks are None/empty."""

    dcbx_mode: str | None = None
    trust: str | None = None
    dscp2prio: dict[int, tuple[int, ...]] = field(default_factory=dict)
    buffer_sizes: tuple[int, ...] = ()
    max_buffer_size: int | None = None
    cable_len: int | None = None
    pfc_enabled: tuple[bool, ...] = ()
    pfc_buffer: tuple[int, ...] = ()
    tcs: tuple[MlnxQosTc, ...] = ()

    @property
    def pfc_priorities(self) -> tuple[int, ...]:
        """Priorities with PFC enabled."""
        return tuple(p for p, on in enumerate(self.pfc_enabled) if on)

    def prio_of_dscp(self, dscp: int) -> int:
        """Return the priority a DSCP value maps to.

        Args:
            dscp: 0..63.

        Returns:
            The priority.

        Raises:
            KeyError: if the dscp2prio map does not list the DSCP value.
        """
        for prio, dscps in self.dscp2prio.items():
            if dscp in dscps:
                return prio
        raise KeyError(f"DSCP {dscp} is not in the dscp2prio mapping")

    def tc_of_priority(self, prio: int) -> MlnxQosTc:
        """Return the traffic class a priority is mapped to.

        Args:
            prio: 0..7.

        Returns:
            The traffic class.

        Raises:
            KeyError: if no printed TC lists the priority.
        """
        for tc in self.tcs:
            if prio in tc.priorities:
                return tc
        raise KeyError(f"priority {prio} is not mapped to a printed TC")


@dataclass
class _Builder:
    dcbx_mode: str | None = None
    trust: str | None = None
    cable_len: int | None = None
    buffer_sizes: tuple[int, ...] = ()
    max_buffer_size: int | None = None
    pfc_enabled: tuple[bool, ...] = ()
    pfc_buffer: tuple[int, ...] = ()
    recognised: bool = False
    dscp2prio: dict[int, list[int]] = field(default_factory=dict)
    last_prio: int | None = None
    tcs: list[MlnxQosTc] = field(default_factory=list)


def parse(text: str) -> MlnxQos:
    """Parse mlnx_qos output.

    Args:
        text: The tool's stdout.

    Returns:
        The parsed state.

    Raises:
        ParseError: if no mlnx_qos section is recognised, or a PFC row does not have eight
            columns, or a ``priority:`` line comes before any ``tc:`` line.
    """
    builder = _Builder()
    for number, line in enumerate(content_lines(text), start=1):
        _scan_line(builder, number, line)
    if not builder.recognised and not builder.dscp2prio and not builder.tcs:
        fail(
            TOOL,
            "no mlnx_qos output found (expected 'DCBX mode:', 'Priority trust state:', "
            "'PFC configuration:' or 'tc: N ratelimit:' lines)",
        )
    return _build(builder)


def _scan_line(builder: _Builder, number: int, line: str) -> None:
    if match := _TC_RE.match(line):
        builder.tcs.append(_tc(match))
    elif match := _TC_PRIO_RE.match(line):
        _add_tc_priority(builder, number, int(match["prio"]))
    elif match := _PFC_ROW_RE.match(line):
        _pfc_row(builder, number, match["name"], match["values"].split())
    elif match := _DSCP2PRIO_RE.match(line):
        _dscp_line(builder, number, match)
    else:
        _scan_scalar(builder, line)


def _scan_scalar(builder: _Builder, line: str) -> None:
    if match := _DCBX_RE.match(line):
        builder.dcbx_mode = match["mode"]
    elif match := _TRUST_RE.match(line):
        builder.trust = match["trust"]
    elif match := _CABLE_RE.match(line):
        builder.cable_len = int(match["len"])
    elif match := _BUFFER_RE.match(line):
        _buffers(builder, match["sizes"])
    else:
        return
    builder.recognised = True


def _tc(match: re.Match[str]) -> MlnxQosTc:
    rate = match["rate"]
    bw = match["bw"]
    bw_percent = None
    if bw is not None and bw.endswith("%"):
        bw_percent = to_int(TOOL, bw.removesuffix("%"), "ETS bw")
    return MlnxQosTc(
        tc=int(match["tc"]),
        ratelimit_gbps=None if rate == "unlimited" else to_float(TOOL, rate.split()[0], "rate"),
        tsa=match["tsa"],
        bw_percent=bw_percent,
    )


def _add_tc_priority(builder: _Builder, number: int, prio: int) -> None:
    if not builder.tcs:
        fail(TOOL, f"line {number}: 'priority: {prio}' before any 'tc: N ratelimit:' line")
    last = builder.tcs[-1]
    builder.tcs[-1] = MlnxQosTc(
        last.tc, last.ratelimit_gbps, last.tsa, last.bw_percent, (*last.priorities, prio)
    )


def _pfc_row(builder: _Builder, number: int, name: str, values: list[str]) -> None:
    if len(values) != _PRIORITIES:
        fail(TOOL, f"line {number}: PFC '{name}' row has {len(values)} columns, expected 8")
    ints = tuple(int(v) for v in values)
    builder.recognised = True
    if name == "enabled":
        builder.pfc_enabled = tuple(v == 1 for v in ints)
    elif name == "buffer":
        builder.pfc_buffer = ints
    elif ints != tuple(range(_PRIORITIES)):
        fail(TOOL, f"line {number}: PFC priority row should list 0..7, got {values}")


def _dscp_line(builder: _Builder, number: int, match: re.Match[str]) -> None:
    if match["prio"] is not None:
        builder.last_prio = int(match["prio"])
    if builder.last_prio is None:
        fail(TOOL, f"line {number}: 'dscp:' continuation line without a preceding 'prio:N'")
    dscps = [int(v) for v in match["dscps"].split(",") if v]
    builder.dscp2prio.setdefault(builder.last_prio, []).extend(dscps)


def _buffers(builder: _Builder, sizes: str) -> None:
    values: list[int] = []
    for token in sizes.split(","):
        if token.startswith("max_buffer_size="):
            builder.max_buffer_size = to_int(TOOL, token.split("=", 1)[1], "max_buffer_size")
        elif token:
            values.append(to_int(TOOL, token, "receive buffer size"))
    builder.buffer_sizes = tuple(values)


def _build(builder: _Builder) -> MlnxQos:
    return MlnxQos(
        dcbx_mode=builder.dcbx_mode,
        trust=builder.trust,
        dscp2prio={p: tuple(d) for p, d in builder.dscp2prio.items()},
        buffer_sizes=builder.buffer_sizes,
        max_buffer_size=builder.max_buffer_size,
        cable_len=builder.cable_len,
        pfc_enabled=builder.pfc_enabled,
        pfc_buffer=builder.pfc_buffer,
        tcs=tuple(builder.tcs),
    )
