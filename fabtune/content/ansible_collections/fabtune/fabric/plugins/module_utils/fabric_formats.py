# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""One parser per tool format, shared by the hosts' modules and the controller.

The hosts' modules import this file as module_utils; the controller loads the same file
(``fabtune.collection.module_util``) for ``fabtune parse``, the checks and the change lists. So it
stays standard-library Python 3.8 and imports nothing of fabtune or Ansible. A parser returns a
frozen record; output that is not the tool's format raises :class:`FormatError`, whose message
starts with the tool's name and says what was expected (the controller raises it again as its
``ParseError``). Formats: ``../shared/formats.md`` of the project (mlnx_qos §4.2, nvidia-smi topo
§8) and the fixtures beside it.

* ``mlnx_qos -i IF [-a]`` (mlnx-tools ``pretty_print``): :func:`parse_mlnx_qos`.
* ``nvidia-smi topo -m``: :func:`parse_topo`.
* ``nccl.conf`` (``KEY=value`` lines, NCCL's ``NCCL_CONF_FILE``): :func:`parse_nccl_conf`.
* ``opensm.conf`` (``key value`` lines, as opensm reads them): :func:`parse_opensm_conf`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

PRIORITIES = 8


class FormatError(ValueError):
    """Text that is not the output of the tool it should be (the message names the tool)."""


def _fail(tool: str, message: str) -> NoReturn:
    raise FormatError(f"{tool}: {message}")


def _to_int(tool: str, value: str, what: str) -> int:
    """A decimal or ``0x`` hexadecimal token."""
    try:
        return int(value, 0) if value.lower().startswith("0x") else int(value, 10)
    except ValueError:
        _fail(tool, f"{what} is not an integer: {value!r}")


def _to_float(tool: str, value: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        _fail(tool, f"{what} is not a number: {value!r}")


def _lines(text: str) -> list[str]:
    """The lines of a tool's output, trailing whitespace and carriage returns dropped."""
    return [line.rstrip() for line in text.splitlines()]


# --------------------------------------------------------------------------- mlnx_qos

MLNX_QOS = "mlnx_qos"
# Indentation is not relied upon: copies whose whitespace was collapsed parse the same.
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
        """The priority a DSCP value (0..63) maps to; KeyError when the map does not list it."""
        for prio, dscps in self.dscp2prio.items():
            if dscp in dscps:
                return prio
        raise KeyError(f"DSCP {dscp} is not in the dscp2prio mapping")

    def tc_of_priority(self, prio: int) -> MlnxQosTc:
        """The traffic class a priority (0..7) is mapped to; KeyError when no printed TC lists it."""
        for tc in self.tcs:
            if prio in tc.priorities:
                return tc
        raise KeyError(f"priority {prio} is not mapped to a printed TC")


@dataclass
class _QosBuilder:
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


def parse_mlnx_qos(text: str) -> MlnxQos:
    """Parse ``mlnx_qos -i IF [-a]`` output.

    Raises:
        FormatError: when no mlnx_qos section is recognised, a PFC row does not have eight
            columns, or a ``priority:`` line comes before any ``tc:`` line.
    """
    builder = _QosBuilder()
    for number, line in enumerate(_lines(text), start=1):
        _qos_line(builder, number, line)
    if not builder.recognised and not builder.dscp2prio and not builder.tcs:
        _fail(MLNX_QOS, "no mlnx_qos output found (expected 'DCBX mode:', 'Priority trust state:', "
                        "'PFC configuration:' or 'tc: N ratelimit:' lines)")
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


def _qos_line(builder: _QosBuilder, number: int, line: str) -> None:
    match = _TC_RE.match(line)
    if match:
        builder.tcs.append(_qos_tc(match))
        return
    match = _TC_PRIO_RE.match(line)
    if match:
        _qos_tc_priority(builder, number, int(match.group("prio")))
        return
    match = _PFC_ROW_RE.match(line)
    if match:
        _qos_pfc_row(builder, number, match.group("name"), match.group("values").split())
        return
    match = _DSCP2PRIO_RE.match(line)
    if match:
        _qos_dscp_line(builder, number, match)
        return
    _qos_scalar(builder, line)


def _qos_scalar(builder: _QosBuilder, line: str) -> None:
    dcbx, trust = _DCBX_RE.match(line), _TRUST_RE.match(line)
    cable, buffers = _CABLE_RE.match(line), _BUFFER_RE.match(line)
    if dcbx:
        builder.dcbx_mode = dcbx.group("mode")
    elif trust:
        builder.trust = trust.group("trust")
    elif cable:
        builder.cable_len = int(cable.group("len"))
    elif buffers:
        _qos_buffers(builder, buffers.group("sizes"))
    else:
        return
    builder.recognised = True


def _qos_tc(match: re.Match[str]) -> MlnxQosTc:
    rate, bw = match.group("rate"), match.group("bw")
    bw_percent = None
    if bw is not None and bw.endswith("%"):
        bw_percent = _to_int(MLNX_QOS, bw[:-1], "ETS bw")
    return MlnxQosTc(
        tc=int(match.group("tc")),
        ratelimit_gbps=None if rate == "unlimited" else _to_float(MLNX_QOS, rate.split()[0], "rate"),
        tsa=match.group("tsa"),
        bw_percent=bw_percent,
    )


def _qos_tc_priority(builder: _QosBuilder, number: int, prio: int) -> None:
    if not builder.tcs:
        _fail(MLNX_QOS, f"line {number}: 'priority: {prio}' before any 'tc: N ratelimit:' line")
    last = builder.tcs[-1]
    builder.tcs[-1] = MlnxQosTc(last.tc, last.ratelimit_gbps, last.tsa, last.bw_percent,
                                (*last.priorities, prio))


def _qos_pfc_row(builder: _QosBuilder, number: int, name: str, values: list[str]) -> None:
    if len(values) != PRIORITIES:
        _fail(MLNX_QOS, f"line {number}: PFC '{name}' row has {len(values)} columns, expected 8")
    ints = tuple(int(v) for v in values)
    builder.recognised = True
    if name == "enabled":
        builder.pfc_enabled = tuple(v == 1 for v in ints)
    elif name == "buffer":
        builder.pfc_buffer = ints
    elif ints != tuple(range(PRIORITIES)):
        _fail(MLNX_QOS, f"line {number}: PFC priority row should list 0..7, got {values}")


def _qos_dscp_line(builder: _QosBuilder, number: int, match: re.Match[str]) -> None:
    if match.group("prio") is not None:
        builder.last_prio = int(match.group("prio"))
    if builder.last_prio is None:
        _fail(MLNX_QOS, f"line {number}: 'dscp:' continuation line without a preceding 'prio:N'")
    dscps = [int(v) for v in match.group("dscps").split(",") if v]
    builder.dscp2prio.setdefault(builder.last_prio, []).extend(dscps)


def _qos_buffers(builder: _QosBuilder, sizes: str) -> None:
    values: list[int] = []
    for token in sizes.split(","):
        if token.startswith("max_buffer_size="):
            builder.max_buffer_size = _to_int(MLNX_QOS, token.split("=", 1)[1], "max_buffer_size")
        elif token:
            values.append(_to_int(MLNX_QOS, token, "receive buffer size"))
    builder.buffer_sizes = tuple(values)


# --------------------------------------------------------------------------- nvidia-smi topo -m

TOPO = "topo"
# Device column labels: GPUn, NICn, or an RDMA device name in older drivers (mlx5_0).
_DEVICE_LABEL_RE = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+)$")
# Affinity column labels, in the order nvidia-smi prints them.
AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_RE = re.compile(r"^\s*GPU0\b.*$")
# Cell values: X (self), NV# (bonded NVLinks), PIX, PXB, PHB, NODE, SYS.
_CELL_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
# "  NIC0: mlx5_0"
_NIC_LEGEND_RE = re.compile(r"^\s*(?P<nic>NIC\d+):\s*(?P<device>\S+)\s*$")
_LEGEND_RE = re.compile(r"^\s*(?:NIC )?Legend:\s*$")


@dataclass(frozen=True)
class TopoMatrix:
    """The ``nvidia-smi topo -m`` matrix.

    ``cells[row][column]`` is the printed distance; ``cpu_affinity``/``numa_affinity``/
    ``gpu_numa_id`` are keyed by GPU label; ``nic_names`` maps ``NICk`` to ``mlx5_k``. Columns
    are TAB separated by the tool, space separated in many copies: both parse, as no cell holds
    a space.
    """

    columns: tuple[str, ...]
    cells: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPU column labels (``GPU0`` ...)."""
        return tuple(c for c in self.columns if c.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        """NIC column labels (``NIC0`` ... or ``mlx5_0`` ...)."""
        return tuple(c for c in self.columns if not c.startswith("GPU"))

    def distance(self, gpu: str | int, nic: str | int) -> str:
        """The printed distance between a GPU (``"GPU3"`` or 3) and a NIC (``"NIC2"``, 2, or an
        RDMA device of the NIC legend such as ``"mlx5_2"``; another ``GPUn`` too).

        Raises:
            KeyError: if either label is not in the matrix (or its rows were not captured).
        """
        row = gpu if isinstance(gpu, str) else f"GPU{gpu}"
        column = self._column(nic)
        if row in self.cells and column in self.cells[row]:
            return self.cells[row][column]
        if column in self.cells and row in self.cells[column]:
            return self.cells[column][row]
        raise KeyError(f"no topology entry for {row} / {column}")

    def nic_device(self, nic: str) -> str:
        """The RDMA device of a NIC column (``NIC0`` -> ``mlx5_0``; an ``mlx5_*`` column is its own).

        Raises:
            KeyError: if the legend does not name the NIC.
        """
        if nic in self.nic_names:
            return self.nic_names[nic]
        if _DEVICE_LABEL_RE.match(nic) and not nic.startswith(("GPU", "NIC")):
            return nic
        raise KeyError(f"{nic} is not in the NIC Legend")

    def _column(self, nic: str | int) -> str:
        if isinstance(nic, int):
            return f"NIC{nic}"
        if nic in self.columns:
            return nic
        for label, device in self.nic_names.items():
            if device == nic:
                return label
        raise KeyError(f"{nic} is neither a matrix column nor in the NIC Legend")


def parse_topo(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (a shell prompt line before the header is ignored).

    Raises:
        FormatError: without a header row, without rows, or on a short or unknown cell.
    """
    lines = _lines(text)
    start = next((i for i, line in enumerate(lines) if _HEADER_RE.match(line)), None)
    if start is None:
        _fail(TOPO, "no matrix header found (expected a line of column labels starting 'GPU0')")
    columns, affinity = _topo_header(lines[start])
    cells: dict[str, dict[str, str]] = {}
    extras: dict[str, dict[str, str]] = {label: {} for label in affinity}
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if not line.strip() or _LEGEND_RE.match(line):
            break
        _topo_row(line, number, columns, affinity, cells=cells, extras=extras)
    if not cells:
        _fail(TOPO, "matrix has a header but no rows (expected lines starting 'GPU0')")
    names = {}
    for line in lines[start:]:
        match = _NIC_LEGEND_RE.match(line)
        if match:
            names[match.group("nic")] = match.group("device")
    return TopoMatrix(columns=columns, cells=cells, cpu_affinity=extras.get("CPU Affinity", {}),
                      numa_affinity=extras.get("NUMA Affinity", {}),
                      gpu_numa_id=extras.get("GPU NUMA ID", {}), nic_names=names)


def _topo_header(line: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    text = line
    affinity = tuple(label for label in AFFINITY_LABELS if label in text)
    for label in affinity:
        text = text.replace(label, " ")
    columns = tuple(text.split())
    bad = [c for c in columns if not _DEVICE_LABEL_RE.match(c)]
    if bad:
        _fail(TOPO, f"unknown column label(s) {', '.join(bad)} in header {line.strip()!r}")
    return columns, affinity


def _topo_row(line: str, number: int, columns: tuple[str, ...], affinity: tuple[str, ...], *,
              cells: dict[str, dict[str, str]], extras: dict[str, dict[str, str]]) -> None:
    tokens = line.split()
    label, values = tokens[0], tokens[1:]
    if label not in columns or len(values) < len(columns):
        _fail(TOPO, f"line {number}: expected a row label from the header and {len(columns)} cells, "
                    f"got {line.strip()!r}")
    bad = [v for v in values[:len(columns)] if not _CELL_RE.match(v)]
    if bad:
        _fail(TOPO, f"line {number}: unknown distance(s) {', '.join(bad)}")
    cells[label] = dict(zip(columns, values[:len(columns)]))
    for name, value in zip(affinity, values[len(columns):]):
        extras[name][label] = value


# --------------------------------------------------------------------------- nccl.conf


def parse_nccl_conf(text: str) -> dict[str, str]:
    """``KEY=value`` lines of an nccl.conf, or of any ``*.conf`` of that shape: ``#`` comments,
    blank lines and lines without ``=`` skipped, key and value stripped, values kept as text."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out


# --------------------------------------------------------------------------- opensm.conf


def opensm_conf_lines(text: str) -> list[tuple[str, str]]:
    """``(key, value)`` of each line, in order, as opensm's ``osm_subn_parse_conf_file``
    (``opensm/osm_subnet.c``) splits them: a ``#`` anywhere ends the line, the key is the first
    word, the value the rest without surrounding blanks and one pair of matching quotes
    (``clean_val``)."""
    out: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0]
        parts = line.strip(" \t\n").split(None, 1)
        if not parts:
            continue
        value = parts[1].strip() if len(parts) > 1 else ""
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.append((parts[0], value))
    return out


def parse_opensm_conf(text: str) -> dict[str, str]:
    """The value opensm takes for each key of an opensm.conf (the last line that sets it)."""
    return dict(opensm_conf_lines(text))
