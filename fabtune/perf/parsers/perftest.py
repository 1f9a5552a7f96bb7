"""Parse perftest (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``, ``ib_*_lat``) output.

Text layout (``ctx_print_test_info()``, ``print_report_bw()``, ``perftest_parameters.h``;
formats.md §1.3): a title line (``RDMA_Write BW Test``), a header block of ``Key : value`` pairs
(two per line, tab separated, on some lines), one ``local address:``/``remote address:`` line per
QP (optionally followed by ``GID:``), then a result table (`` #bytes #iterations BW peak[MiB/sec]
...``). Server and client logs captured into one file (superbenchmark) interleave these blocks:
header pairs are merged (first value wins), addresses are all kept and identical result rows
printed by both sides are kept once.

Errors (formats.md §1.4) are recognised and returned as :class:`PerftestFailure` on the result,
with a closed ``kind``; call :meth:`PerftestResult.raise_for_error` to turn that into an
exception.

The ``--out_json`` report is not documented in formats.md; :func:`parse_json` assumes the shape
``{"test_info": {...header keys with '_' for spaces...}, "results": {"MsgSize", "n_iterations",
"BW_peak", "BW_average", "MsgRate"}}`` (``results`` may also be a list of such objects), as
consumed by a third-party tool. That shape is UNVERIFIED against perftest's source.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from fabtune.errors import BenchmarkError
from fabtune.perf.parsers._common import content_lines, fail, to_float, to_int

TOOL = "perftest"

TableKind = Literal["bw", "lat", "lat_duration"]
ErrorKind = Literal[
    "no_device",
    "port_down",
    "link_layer_unknown",
    "resolve_failed",
    "connect_failed",
    "create_resources_failed",
    "modify_qp_failed",
    "socket_setup_failed",
    "completion_error",
    "bad_arguments",
]

# Title line: 20 spaces + testsStr + [Bidirectional ][Post List ]BW|Latency + " Test" (§1.3).
_TITLE_RE = re.compile(
    r"^\s*(?P<title>(?P<verb>[A-Za-z_]+(?: (?:FETCH_AND_ADD|CMP_AND_SWAP))?)"
    r"(?P<mods>(?: Bidirectional| Post List)*) (?P<type>BW|Latency) Test)\s*$"
)
# Header pairs: " Dual-port       : OFF\t\tDevice         : mlx5_0" (values are one token).
_PAIR_RE = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_.*\- ]*?)\s*:\s*(?P<value>\S+)")
# BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x" [+ " OUT %#04x"]
# [+ RDMA_FMT " RKey %#08x VAddr %#016llx"] (§1.3).
_ADDRESS_RE = re.compile(
    r"^\s*(?P<side>local|remote) address:\s+LID (?P<lid>\S+) QPN (?P<qpn>\S+) PSN (?P<psn>\S+)"
    r"(?: OUT (?P<out>\S+))?(?: RKey (?P<rkey>\S+) VAddr (?P<vaddr>\S+))?"
)
# PERF_GID_FMT: 16 decimal bytes separated by ':' (" GID: 00:00:...:255:255:10:10:11:12").
_GID_RE = re.compile(r"^\s*GID: (?P<gid>\d+(?::\d+){15})\s*$")
# RESULT_FMT / RESULT_FMT_G / RESULT_FMT_LAT / RESULT_FMT_LAT_DUR; ucx-issue8852 drops the '#'.
_TABLE_RE = re.compile(r"^\s*#?bytes\s+#?iterations\s+(?P<rest>.*)$")
_UNIT_RE = re.compile(r"BW peak\[(?P<unit>[^\]]+)\]")
# A result row: integers (bytes, iterations) then numbers (REPORT_FMT, REPORT_FMT_LAT...).
_ROW_RE = re.compile(r"^\s*\d+\s+\d+(?:\s+[-+\d.eE]+)+\s*$")
_ROW_START_RE = re.compile(r"^\s*\d+\s+\d+\b")
# stdout/stderr notices that may interleave with the report (§1.3).
_WARNING_RE = re.compile(
    r"(WARNING|Warning|Conflicting CPU frequency|Requested SQ size|Current TX depth)"
)

# Known error messages (§1.4), in priority order: the first kind that matches any line wins.
_ERROR_PATTERNS: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    (
        "no_device",
        re.compile(
            r"Did not detect devices|No IB devices found|IB device \S+ not found"
            r"|Unable to find the Infiniband/RoCE device"
        ),
    ),
    ("port_down", re.compile(r"Port number \d+ state is \S+")),
    ("link_layer_unknown", re.compile(r"Link layer on port \d+ is Unknown")),
    ("resolve_failed", re.compile(r"Problem in resolving basic address and port")),
    ("connect_failed", re.compile(r"Couldn't connect to \S+|Unable to init the socket connection")),
    (
        "create_resources_failed",
        re.compile(
            r"Couldn't get device attributes|Unable to create QP\.|Failed to create QP\."
            r"|Couldn't create IB resources"
        ),
    ),
    (
        "modify_qp_failed",
        re.compile(r"Failed to modify QP \d+ to \w+|Unable to Connect the HCA's through the link"),
    ),
    ("socket_setup_failed", re.compile(r"Unable to set up socket connection")),
    ("completion_error", re.compile(r"Completion with error|Failed status .*: wr_id")),
    ("bad_arguments", re.compile(r"Parser function exited with Error")),
)

# Header keys normalised (lower case, '_', '-', '.', '*' -> space) to record field names.
_HEADER_FIELDS: dict[str, str] = {
    "dual port": "dual_port",
    "device": "device",
    "number of qps": "num_qps",
    "transport type": "transport_type",
    "connection type": "connection_type",
    "using srq": "using_srq",
    "pcie relax order": "pcie_relax_order",
    "lock free": "lock_free",
    "ibv wr api": "ibv_wr_api",
    "using enhanced reorder": "enhanced_reorder",
    "tx depth": "tx_depth",
    "rx depth": "rx_depth",
    "cq moderation": "cq_moderation",
    "cqe poll batch": "cqe_poll_batch",
    "mtu": "mtu",
    "link type": "link_type",
    "gid index": "gid_index",
    "max inline data": "max_inline_data",
    "outstand reads": "outstanding_reads",
    "rdma cm qps": "rdma_cm",
    "data ex method": "data_ex_method",
    "tos": "tos",
    "numa node": "numa_node",
}
_INT_FIELDS = frozenset(
    {"num_qps", "tx_depth", "rx_depth", "cq_moderation", "mtu", "gid_index", "max_inline_data",
     "outstanding_reads", "tos", "numa_node"}
)
_BOOL_FIELDS = frozenset(
    {"dual_port", "using_srq", "pcie_relax_order", "lock_free", "ibv_wr_api", "enhanced_reorder",
     "rdma_cm"}
)
# perftest built without relaxed ordering (HAVE_RO) or the thread-domain API (HAVE_TD_API) prints
# "Unsupported" for these two (ctx_print_test_info() in src/perftest_parameters.c): parsed as None.
_MAY_BE_UNSUPPORTED = frozenset({"pcie_relax_order", "lock_free"})


@dataclass(frozen=True)
class PerftestHeader:
    """The header block printed by ``ctx_print_test_info()``; absent fields are None, and so are the
    two features a perftest build may lack (``Unsupported``: ``pcie_relax_order``, ``lock_free``)."""

    test: str | None = None
    dual_port: bool | None = None
    device: str | None = None
    num_qps: int | None = None
    transport_type: str | None = None
    connection_type: str | None = None
    using_srq: bool | None = None
    pcie_relax_order: bool | None = None
    lock_free: bool | None = None
    ibv_wr_api: bool | None = None
    enhanced_reorder: bool | None = None
    tx_depth: int | None = None
    rx_depth: int | None = None
    cq_moderation: int | None = None
    cqe_poll_batch: str | None = None
    mtu: int | None = None
    link_type: str | None = None
    gid_index: int | None = None
    max_inline_data: int | None = None
    outstanding_reads: int | None = None
    rdma_cm: bool | None = None
    data_ex_method: str | None = None
    tos: int | None = None
    numa_node: int | None = None


@dataclass(frozen=True)
class PerftestAddress:
    """One ``local address:``/``remote address:`` line (plus its ``GID:`` line, if any)."""

    side: Literal["local", "remote"]
    lid: int
    qpn: int
    psn: int
    out_reads: int | None = None
    rkey: int | None = None
    vaddr: int | None = None
    gid: str | None = None

    def gid_address(self) -> ipaddress.IPv6Address | None:
        """Return the GID (printed as 16 decimal bytes) as an IPv6 address, or None."""
        if self.gid is None:
            return None
        return ipaddress.IPv6Address(bytes(int(b) for b in self.gid.split(":")))


@dataclass(frozen=True)
class BwRow:
    """One bandwidth result row; bandwidths are in the table's unit."""

    bytes: int
    iterations: int
    bw_peak: float
    bw_average: float
    msg_rate_mpps: float


@dataclass(frozen=True)
class LatRow:
    """One latency result row (usec); duration-mode rows only carry t_avg and tps."""

    bytes: int
    iterations: int
    t_avg: float
    t_min: float | None = None
    t_max: float | None = None
    t_typical: float | None = None
    t_stdev: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    tps_average: float | None = None


@dataclass(frozen=True)
class PerftestFailure:
    """A known perftest error: ``kind`` is the most specific cause; ``messages`` the lines."""

    kind: ErrorKind
    messages: tuple[str, ...]


class PerftestToolError(BenchmarkError):
    """perftest reported an error (raised by :meth:`PerftestResult.raise_for_error`)."""

    def __init__(self, failure: PerftestFailure) -> None:
        self.kind: ErrorKind = failure.kind
        self.messages = failure.messages
        super().__init__(f"perftest failed ({failure.kind}): {'; '.join(failure.messages)}")


@dataclass(frozen=True)
class PerftestResult:
    """Everything read from one perftest log (one side, or server and client merged)."""

    header: PerftestHeader
    addresses: tuple[PerftestAddress, ...] = ()
    table: TableKind | None = None
    unit: str | None = None
    bw_rows: tuple[BwRow, ...] = ()
    lat_rows: tuple[LatRow, ...] = ()
    sides: int = 0
    warnings: tuple[str, ...] = ()
    error: PerftestFailure | None = None

    def raise_for_error(self) -> None:
        """Raise if the log reports a perftest error.

        Raises:
            PerftestToolError: carrying the failure ``kind`` and messages.
        """
        if self.error is not None:
            raise PerftestToolError(self.error)

    def bw_average_gbps(self, row: BwRow) -> float:
        """Convert a row's average bandwidth to Gb/s (1e9 bit/s).

        perftest's ``MB/sec`` and ``MiB/sec`` are both 2**20 bytes/s (formats.md §1.2).

        Args:
            row: One of :attr:`bw_rows`.

        Returns:
            The average bandwidth in Gb/s.
        """
        return to_gbps(row.bw_average, self.unit)


def to_gbps(value: float, unit: str | None) -> float:
    """Convert a perftest bandwidth figure to Gb/s.

    Args:
        value: The number as printed.
        unit: ``"Gb/sec"``, ``"MiB/sec"`` or ``"MB/sec"``.

    Returns:
        The value in Gb/s.

    Raises:
        ParseError: for an unknown unit.
    """
    if unit not in ("Gb/sec", "MiB/sec", "MB/sec"):
        fail(TOOL, f"unknown bandwidth unit {unit!r} (expected Gb/sec, MiB/sec or MB/sec)")
    return value if unit == "Gb/sec" else value * 2**20 * 8 / 1e9


@dataclass
class _Builder:
    """Mutable accumulator used while scanning lines."""

    header: dict[str, str] = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)
    addresses: list[PerftestAddress] = field(default_factory=list)
    table: TableKind | None = None
    unit: str | None = None
    rows: list[tuple[str, ...]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[tuple[ErrorKind, str]] = field(default_factory=list)


def parse(text: str, *, allow_partial: bool = False) -> PerftestResult:
    """Parse perftest text output (one side, or both sides interleaved).

    Args:
        text: The tool's stdout/stderr.
        allow_partial: Accept a log that stops before the result rows (header only).

    Returns:
        The parsed result. A log with a known error message returns with ``error`` set.

    Raises:
        ParseError: if no perftest output is recognised, or (unless ``allow_partial``) the
            result table is missing or empty, or a result row is malformed.
    """
    builder = _Builder()
    for number, line in enumerate(content_lines(text), start=1):
        _scan_line(builder, number, line)
    return _finish(builder, allow_partial)


def _scan_line(builder: _Builder, number: int, line: str) -> None:
    if not line.strip():
        return
    if _scan_error(builder, line) or _scan_structure(builder, line):
        return
    if _WARNING_RE.search(line):
        builder.warnings.append(line.strip())
        return
    if builder.table is not None and _ROW_START_RE.match(line):
        _scan_row(builder, builder.table, number, line)
        return
    _scan_header_pairs(builder, line)


def _scan_error(builder: _Builder, line: str) -> bool:
    for kind, pattern in _ERROR_PATTERNS:
        if pattern.search(line):
            builder.errors.append((kind, line.strip()))
            return True
    return False


def _scan_structure(builder: _Builder, line: str) -> bool:
    title = _TITLE_RE.match(line)
    if title:
        builder.titles.append(title["title"])
        return True
    address = _ADDRESS_RE.match(line)
    if address:
        builder.addresses.append(_address(address))
        return True
    gid = _GID_RE.match(line)
    if gid:
        _attach_gid(builder, gid["gid"])
        return True
    table = _TABLE_RE.match(line)
    if table:
        _start_table(builder, table["rest"])
        return True
    return False


def _address(match: re.Match[str]) -> PerftestAddress:
    def opt(name: str) -> int | None:
        value = match[name]
        return None if value is None else to_int(TOOL, value, name)

    side: Literal["local", "remote"] = "local" if match["side"] == "local" else "remote"
    return PerftestAddress(
        side=side,
        lid=to_int(TOOL, match["lid"], "LID"),
        qpn=to_int(TOOL, match["qpn"], "QPN"),
        psn=to_int(TOOL, match["psn"], "PSN"),
        out_reads=opt("out"),
        rkey=opt("rkey"),
        vaddr=opt("vaddr"),
    )


def _attach_gid(builder: _Builder, gid: str) -> None:
    if not builder.addresses:
        fail(TOOL, f"'GID: {gid}' line without a preceding 'local/remote address:' line")
    builder.addresses[-1] = dataclasses.replace(builder.addresses[-1], gid=gid)


def _start_table(builder: _Builder, rest: str) -> None:
    unit = _UNIT_RE.search(rest)
    if unit:
        kind: TableKind = "bw"
    elif "t_min[usec]" in rest:
        kind = "lat"
    elif "t_avg[usec]" in rest:
        kind = "lat_duration"
    else:
        fail(TOOL, f"unknown result table header: {rest.strip()!r}")
    if builder.table is not None and builder.table != kind:
        fail(TOOL, f"two different result tables in one log ({builder.table} and {kind})")
    builder.table = kind
    builder.unit = unit["unit"] if unit else "usec"


_MIN_COLUMNS: dict[TableKind, int] = {"bw": 5, "lat": 9, "lat_duration": 4}


def _scan_row(builder: _Builder, table: TableKind, number: int, line: str) -> None:
    tokens = tuple(line.split())
    if not _ROW_RE.match(line) or len(tokens) < _MIN_COLUMNS[table]:
        fail(
            TOOL,
            f"malformed result row at line {number} (expected {_MIN_COLUMNS[table]} "
            f"numeric columns for a {table} table): {line.strip()!r}",
        )
    if tokens not in builder.rows:
        builder.rows.append(tokens)


def _scan_header_pairs(builder: _Builder, line: str) -> None:
    pairs = [(_normalise_key(m["key"]), m["value"]) for m in _PAIR_RE.finditer(line)]
    if not pairs or pairs[0][0] not in _HEADER_FIELDS:
        return
    for key, value in pairs:
        name = _HEADER_FIELDS.get(key)
        if name is not None:
            builder.header.setdefault(name, value)


def _normalise_key(key: str) -> str:
    return " ".join(re.sub(r"[_\-.*]", " ", key).lower().split())


def _finish(builder: _Builder, allow_partial: bool) -> PerftestResult:
    error = _failure(builder.errors)
    recognised = builder.titles or builder.header or builder.table or error
    if not recognised:
        fail(
            TOOL,
            "no perftest output found (expected a '<verb> BW|Latency Test' title, "
            "header lines such as ' Device : mlx5_0', a ' #bytes' result table or a known "
            "error message)",
        )
    if error is None and not allow_partial:
        _require_rows(builder)
    return _build(builder, error)


def _require_rows(builder: _Builder) -> None:
    if builder.table is None:
        fail(TOOL, "no result table found (expected a line starting with ' #bytes')")
    if not builder.rows:
        fail(TOOL, "result table has no rows (output truncated after the ' #bytes' line?)")


def _failure(errors: list[tuple[ErrorKind, str]]) -> PerftestFailure | None:
    if not errors:
        return None
    order = [kind for kind, _ in _ERROR_PATTERNS]
    kind = min((k for k, _ in errors), key=order.index)
    return PerftestFailure(kind=kind, messages=tuple(dict.fromkeys(m for _, m in errors)))


def _build(builder: _Builder, error: PerftestFailure | None) -> PerftestResult:
    header = _header(builder.header, builder.titles[0] if builder.titles else None)
    bw_rows: tuple[BwRow, ...] = ()
    lat_rows: tuple[LatRow, ...] = ()
    if builder.table == "bw":
        bw_rows = tuple(_bw_row(t) for t in builder.rows)
    elif builder.table is not None:
        lat_rows = tuple(_lat_row(t, builder.table) for t in builder.rows)
    return PerftestResult(
        header=header,
        addresses=tuple(builder.addresses),
        table=builder.table,
        unit=builder.unit,
        bw_rows=bw_rows,
        lat_rows=lat_rows,
        sides=len(builder.titles),
        warnings=tuple(builder.warnings),
        error=error,
    )


def _header(raw: dict[str, str], title: str | None) -> PerftestHeader:
    values: dict[str, Any] = {"test": title}
    for name, value in raw.items():
        values[name] = _header_value(name, value)
    return PerftestHeader(**values)


def _header_value(name: str, value: str) -> int | bool | str | None:
    if name in _INT_FIELDS:
        return to_int(TOOL, value.removesuffix("[B]"), name)
    if name in _MAY_BE_UNSUPPORTED and value == "Unsupported":
        return None
    if name in _BOOL_FIELDS:
        if value not in ("ON", "OFF"):
            fail(TOOL, f"{name} should be ON or OFF, got {value!r}")
        return value == "ON"
    return value


def _bw_row(tokens: tuple[str, ...]) -> BwRow:
    return BwRow(
        bytes=to_int(TOOL, tokens[0], "#bytes"),
        iterations=to_int(TOOL, tokens[1], "#iterations"),
        bw_peak=to_float(TOOL, tokens[2], "BW peak"),
        bw_average=to_float(TOOL, tokens[3], "BW average"),
        msg_rate_mpps=to_float(TOOL, tokens[4], "MsgRate"),
    )


def _lat_row(tokens: tuple[str, ...], table: TableKind) -> LatRow:
    nums = [to_float(TOOL, t, "latency") for t in tokens[2:]]
    size = to_int(TOOL, tokens[0], "#bytes")
    iterations = to_int(TOOL, tokens[1], "#iterations")
    if table == "lat_duration":
        return LatRow(bytes=size, iterations=iterations, t_avg=nums[0], tps_average=nums[1])
    return LatRow(
        bytes=size,
        iterations=iterations,
        t_min=nums[0],
        t_max=nums[1],
        t_typical=nums[2],
        t_avg=nums[3],
        t_stdev=nums[4],
        p99=nums[5],
        p99_9=nums[6],
    )


# --- --out_json -----------------------------------------------------------------------------

# Bare words in a non-strict JSON report (`"Device": mlx5_0`) and trailing commas; only used
# when strict json.loads fails (third-party consumers quote these themselves; UNVERIFIED).
_BARE_WORD_RE = re.compile(r'(?<=[:\[,])\s*(?P<word>[A-Za-z_][\w.\-/]*)\s*(?=[,}\]])')
_TRAILING_COMMA_RE = re.compile(r",\s*(?=[}\]])")
_JSON_RESULT_KEYS = ("MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate")


def parse_json(text: str) -> PerftestResult:
    """Parse a perftest ``--out_json`` report (assumed shape: see the module docstring).

    Args:
        text: Contents of the JSON file.

    Returns:
        A result with a ``bw`` table (unit taken from ``"unit"`` in ``test_info`` if present).

    Raises:
        ParseError: if the text is not JSON or lacks ``results`` with the expected keys.
    """
    data = _load_json(text)
    if not isinstance(data, dict) or "results" not in data:
        fail(TOOL, "JSON report has no 'results' object")
    info = data.get("test_info", {})
    if not isinstance(info, dict):
        fail(TOOL, "JSON 'test_info' is not an object")
    results = data["results"]
    rows = results if isinstance(results, list) else [results]
    return PerftestResult(
        header=_json_header(info),
        table="bw",
        unit=_opt_str(info.get("unit")),
        bw_rows=tuple(_json_row(row) for row in rows),
        sides=1,
    )


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    repaired = _TRAILING_COMMA_RE.sub("", _BARE_WORD_RE.sub(r' "\g<word>"', text))
    try:
        return json.loads(repaired)
    except json.JSONDecodeError as err:
        fail(TOOL, f"JSON report is not valid JSON ({err.msg} at line {err.lineno})")


def _json_header(info: dict[str, Any]) -> PerftestHeader:
    raw: dict[str, str] = {}
    for key, value in info.items():
        name = _HEADER_FIELDS.get(_normalise_key(key))
        if name is not None:
            raw[name] = str(value)
    return _header(raw, _opt_str(info.get("test")))


def _json_row(row: Any) -> BwRow:
    if not isinstance(row, dict) or any(k not in row for k in _JSON_RESULT_KEYS):
        fail(TOOL, f"JSON 'results' entry lacks one of {', '.join(_JSON_RESULT_KEYS)}")
    return BwRow(
        bytes=to_int(TOOL, str(row["MsgSize"]), "MsgSize"),
        iterations=to_int(TOOL, str(row["n_iterations"]), "n_iterations"),
        bw_peak=to_float(TOOL, str(row["BW_peak"]), "BW_peak"),
        bw_average=to_float(TOOL, str(row["BW_average"]), "BW_average"),
        msg_rate_mpps=to_float(TOOL, str(row["MsgRate"]), "MsgRate"),
    )


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
