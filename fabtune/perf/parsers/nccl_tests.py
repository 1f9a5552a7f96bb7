"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``, ...).

Layout (nccl-tests ``src/util.cu``/``common.cu``; formats.md §2.2): ``# nThread 1 nGpus 8
minBytes ... step: 2(factor) warmup iters: 5 iters: 20 ...`` header, ``# Using devices`` then one
``#  Rank  0 Group  0 Pid ... device  0 [0000:04:00] NAME`` line per rank (older builds: ``#   Rank
0 Pid ... [0x00] NAME``), the column header (``#       size         count      type   redop
root     time ...``), rows ``size count type [redop] [root] time algbw busbw #wrong time algbw
busbw #wrong``, then ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : 68.4``.

Older tables have no ``root`` column and call the last column ``error`` (a float or ``N/A``);
non-reducing collectives leave ``redop`` blank. Rows are therefore read right-to-left: the last
eight tokens are the two time/algbw/busbw/check groups, and the 0-2 tokens between ``type`` and
them are ``redop`` (a word) and/or ``root`` (an integer). Some copies lost the leading ``#``
(nccl-tests-issue249); every ``#`` is optional. NCCL INFO/WARN lines interleave and are skipped.

nccl-tests' ``-J`` JSON output is not documented in formats.md and no sample was found, so it is
not parsed here.

The log is read one line at a time (:func:`parse_stream` from a file, memory bounded by the
records kept); a log with more than ``MAX_RECORDS`` rows, device lines and failures is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TextIO

from fabtune.perf.parsers._common import fail, stream_lines, text_lines, to_float, to_int

TOOL = "nccl-tests"
# Rows, device lines and failures kept: a real log has tens of rows per table and one device line
# per rank; this bounds memory (under 1 KB a record) whatever the input.
MAX_RECORDS = 50_000

CheckColumn = Literal["#wrong", "error"]

# "# nccl-tests version 2.17.1 nccl-headers=22603 nccl-library=22603"
_VERSION_RE = re.compile(r"^#?\s*nccl-tests version (?P<version>\S+)")
# "# Collective test starting: all_reduce_perf"
_COLLECTIVE_RE = re.compile(r"^#?\s*Collective test starting: (?P<name>\S+)")
# "# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 ..."
_HEADER_RE = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_HEADER_NUM_RE = re.compile(r"\b(?P<key>nThread|nGpus|minBytes|maxBytes)\s+(?P<value>\d+)")
_HEADER_COLON_RE = re.compile(
    r"(?P<key>warmup iters|agg iters|iters|validation|graph|unalign|step):\s*(?P<value>\S+)"
)
# "#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3"
# "#   Rank  0 Pid 112372 on localhost device  0 [0x00] A100-SXM4-40GB"  (older)
_DEVICE_RE = re.compile(
    r"^#?\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*)$"
)
# "#       size         count      type   redop    root     time   algbw   busbw  #wrong ..."
_COLUMNS_RE = re.compile(r"^#?\s+size\s+count\s+type\b(?P<rest>.*)$")
# A row starts with size, count and a datatype name (float, half, bfloat16, int8, ...).
_ROW_START_RE = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z]\w*\s")
# "# Out of bounds values : 0 OK"
_OOB_RE = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<count>\d+)\s*(?P<status>\S+)?")
# "# Avg bus bandwidth    : 68.4048" [+ " OK"/" FAILED" with NCCL_TESTS_MIN_BW]
_AVG_RE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)\s*(?P<status>\S+)?")
# "<host>: Test NCCL failure common.cu:345 'unhandled system error'" (also CUDA failures).
_FAILURE_RE = re.compile(
    r"^(?P<host>\S+): Test (?P<kind>NCCL|CUDA) failure (?P<where>\S+) '(?P<message>.*)'"
)
# Open MPI's summary "  Exit code:    3".
_EXIT_CODE_RE = re.compile(r"^\s*Exit code:\s+(?P<code>\d+)\s*$")
_BLOCKING_RE = re.compile(r"^#?\s*Blocking Enabled")

_SIDE_COLUMNS = 4  # time, algbw, busbw, #wrong|error


@dataclass(frozen=True)
class NcclTestsHeader:
    """The ``# nThread ...`` line; fields missing from older builds are None."""

    n_thread: int
    n_gpus: int
    min_bytes: int
    max_bytes: int
    step: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    unalign: int | None = None


@dataclass(frozen=True)
class NcclTestsDevice:
    """One ``# Rank N ...`` line; ``group`` is None in the older format."""

    rank: int
    pid: int
    host: str
    device: int
    bus_id: str
    name: str
    group: int | None = None


@dataclass(frozen=True)
class NcclTestsSide:
    """Out-of-place or in-place measurements of one row.

    ``wrong`` is set for ``#wrong`` tables, ``error`` for older ``error`` tables; both are None
    when printed as ``N/A`` (validation disabled).
    """

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None
    error: float | None = None


@dataclass(frozen=True)
class NcclTestsRow:
    """One result row."""

    size_bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: NcclTestsSide
    in_place: NcclTestsSide


@dataclass(frozen=True)
class NcclTestsFailure:
    """``Test NCCL|CUDA failure`` reported by a rank (formats.md §2.4)."""

    kind: Literal["NCCL", "CUDA"]
    host: str
    where: str
    message: str
    exit_code: int | None = None


@dataclass(frozen=True)
class NcclTestsResult:
    """Everything read from one nccl-tests log."""

    header: NcclTestsHeader | None
    devices: tuple[NcclTestsDevice, ...] = ()
    rows: tuple[NcclTestsRow, ...] = ()
    check_column: CheckColumn | None = None
    collective: str | None = None
    version: str | None = None
    blocking: bool = False
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbps: float | None = None
    avg_busbw_status: str | None = None
    failures: tuple[NcclTestsFailure, ...] = ()

    @property
    def max_busbw_gbps(self) -> float | None:
        """Highest out-of-place or in-place busbw over all rows; None without rows."""
        values = [max(r.out_of_place.busbw_gbps, r.in_place.busbw_gbps) for r in self.rows]
        return max(values) if values else None


@dataclass
class _Builder:
    header: NcclTestsHeader | None = None
    devices: list[NcclTestsDevice] = field(default_factory=list)
    rows: list[NcclTestsRow] = field(default_factory=list)
    check_column: CheckColumn | None = None
    collective: str | None = None
    version: str | None = None
    blocking: bool = False
    oob: tuple[int, bool | None] | None = None
    avg: tuple[float, str | None] | None = None
    failures: list[NcclTestsFailure] = field(default_factory=list)
    exit_code: int | None = None


def parse(text: str, *, allow_partial: bool = False) -> NcclTestsResult:
    """Parse nccl-tests text output.

    Args:
        text: The test's stdout (NCCL INFO lines and mpirun noise may interleave).
        allow_partial: Accept a log that has a header or device lines but no result rows.

    Returns:
        The parsed result. A log with ``Test NCCL failure`` lines returns with ``failures`` set.

    Raises:
        ParseError: if no nccl-tests output is recognised, a row is malformed, or (unless
            ``allow_partial``) no result row is found.
    """
    return _parse_lines(text_lines(text), allow_partial)


def parse_stream(stream: TextIO, *, allow_partial: bool = False) -> NcclTestsResult:
    """:func:`parse` reading ``stream`` one line at a time (for logs of any size)."""
    return _parse_lines(stream_lines(stream), allow_partial)


# Launcher labels in front of each line: Open MPI's --tag-output ("[1,0]<stdout>:", jobid,rank)
# and Slurm's srun --label ("0: ", the task id). Real nccl-tests lines never start with either.
_LABEL_RE = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")


def _parse_lines(lines: Iterable[str], allow_partial: bool) -> NcclTestsResult:
    builder = _Builder()
    for number, line in enumerate(lines, start=1):
        _scan_line(builder, number, _LABEL_RE.sub("", line, count=1))
        if len(builder.rows) + len(builder.devices) + len(builder.failures) > MAX_RECORDS:
            fail(TOOL, f"more than {MAX_RECORDS} result rows, rank lines and failures by line {number}: "
                       "not the output of one nccl-tests run")
    return _finish(builder, allow_partial)


def _scan_line(builder: _Builder, number: int, line: str) -> None:
    if " NCCL INFO " in line:  # most of a debug log; no line this parser reads contains it
        return
    if _ROW_START_RE.match(line):
        builder.rows.append(_row(builder, number, line))
    elif _HEADER_RE.match(line):
        builder.header = _header(line)
    elif match := _DEVICE_RE.match(line):
        builder.devices.append(_device(match))
    elif match := _COLUMNS_RE.match(line):
        builder.check_column = "error" if re.search(r"\berror\b", match["rest"]) else "#wrong"
    else:
        _scan_other(builder, line)


def _scan_other(builder: _Builder, line: str) -> None:
    if match := _OOB_RE.match(line):
        status = match["status"]
        builder.oob = (int(match["count"]), None if status is None else status == "OK")
    elif match := _AVG_RE.match(line):
        builder.avg = (to_float(TOOL, match["value"], "Avg bus bandwidth"), match["status"])
    elif match := _FAILURE_RE.match(line):
        kind: Literal["NCCL", "CUDA"] = "NCCL" if match["kind"] == "NCCL" else "CUDA"
        builder.failures.append(
            NcclTestsFailure(kind, match["host"], match["where"], match["message"])
        )
    elif match := _EXIT_CODE_RE.match(line):
        builder.exit_code = int(match["code"])
    elif match := _VERSION_RE.match(line):
        builder.version = match["version"]
    elif match := _COLLECTIVE_RE.match(line):
        builder.collective = match["name"]
    elif _BLOCKING_RE.match(line):
        builder.blocking = True


def _header(line: str) -> NcclTestsHeader:
    nums = {m["key"]: int(m["value"]) for m in _HEADER_NUM_RE.finditer(line)}
    missing = [k for k in ("nThread", "nGpus", "minBytes", "maxBytes") if k not in nums]
    if missing:
        fail(TOOL, f"header line lacks {', '.join(missing)}: {line.strip()!r}")
    colon = {m["key"]: m["value"] for m in _HEADER_COLON_RE.finditer(line)}

    def opt(key: str) -> int | None:
        return to_int(TOOL, colon[key], key) if key in colon else None

    return NcclTestsHeader(
        n_thread=nums["nThread"],
        n_gpus=nums["nGpus"],
        min_bytes=nums["minBytes"],
        max_bytes=nums["maxBytes"],
        step=colon.get("step"),
        warmup_iters=opt("warmup iters"),
        iters=opt("iters"),
        agg_iters=opt("agg iters"),
        validation=opt("validation"),
        graph=opt("graph"),
        unalign=opt("unalign"),
    )


def _device(match: re.Match[str]) -> NcclTestsDevice:
    group = match["group"]
    return NcclTestsDevice(
        rank=int(match["rank"]),
        pid=int(match["pid"]),
        host=match["host"],
        device=int(match["device"]),
        bus_id=match["bus"],
        name=match["name"],
        group=None if group is None else int(group),
    )


def _row(builder: _Builder, number: int, line: str) -> NcclTestsRow:
    tokens = line.split()
    middle = tokens[3 : len(tokens) - 2 * _SIDE_COLUMNS]
    if len(tokens) < 3 + 2 * _SIDE_COLUMNS or len(middle) > 2:
        fail(
            TOOL,
            f"malformed result row at line {number} (expected size count type [redop] [root] "
            f"and 8 time/algbw/busbw/check columns): {line.strip()!r}",
        )
    redop, root = _redop_root(number, middle)
    check = builder.check_column or ("#wrong" if root is not None else "error")
    sides = tokens[len(tokens) - 2 * _SIDE_COLUMNS :]
    return NcclTestsRow(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        type=tokens[2],
        redop=redop,
        root=root,
        out_of_place=_side(sides[:_SIDE_COLUMNS], check, number),
        in_place=_side(sides[_SIDE_COLUMNS:], check, number),
    )


def _redop_root(number: int, middle: list[str]) -> tuple[str | None, int | None]:
    redop: str | None = None
    root: int | None = None
    for token in middle:
        if re.fullmatch(r"-?\d+", token):
            root = int(token)
        elif redop is None and root is None:
            redop = token
        else:
            fail(TOOL, f"unexpected column {token!r} in result row at line {number}")
    return redop, root


def _side(tokens: list[str], check: CheckColumn, number: int) -> NcclTestsSide:
    where = f"result row at line {number}"
    time_us = to_float(TOOL, tokens[0], f"time in {where}")
    algbw = to_float(TOOL, tokens[1], f"algbw in {where}")
    busbw = to_float(TOOL, tokens[2], f"busbw in {where}")
    value = tokens[3]
    if value == "N/A":
        return NcclTestsSide(time_us, algbw, busbw)
    if check == "#wrong":
        wrong = round(to_float(TOOL, value, f"#wrong in {where}"))
        return NcclTestsSide(time_us, algbw, busbw, wrong=wrong)
    return NcclTestsSide(time_us, algbw, busbw, error=to_float(TOOL, value, f"error in {where}"))


def _finish(builder: _Builder, allow_partial: bool) -> NcclTestsResult:
    recognised = builder.header or builder.devices or builder.rows or builder.failures
    if not recognised:
        fail(
            TOOL,
            "no nccl-tests output found (expected a '# nThread' header, '# Rank' device lines, "
            "result rows or 'Test NCCL failure' lines)",
        )
    if not builder.rows and not builder.failures and not allow_partial:
        fail(TOOL, "no result table found (expected a line starting with '#       size')")
    return _build(builder)


def _build(builder: _Builder) -> NcclTestsResult:
    failures = tuple(
        NcclTestsFailure(f.kind, f.host, f.where, f.message, builder.exit_code)
        for f in builder.failures
    )
    check = builder.check_column
    if check is None and builder.rows:
        check = "#wrong" if builder.rows[0].root is not None else "error"
    return NcclTestsResult(
        header=builder.header,
        devices=tuple(builder.devices),
        rows=tuple(builder.rows),
        check_column=check,
        collective=builder.collective,
        version=builder.version,
        blocking=builder.blocking,
        out_of_bounds=builder.oob[0] if builder.oob else None,
        out_of_bounds_ok=builder.oob[1] if builder.oob else None,
        avg_busbw_gbps=builder.avg[0] if builder.avg else None,
        avg_busbw_status=builder.avg[1] if builder.avg else None,
        failures=failures,
    )
