"""``fabtune parse TOOL FILE``: read a tool's saved output and show it as a table or JSON."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
from rich.table import Table
from rich.text import Text

from fabtune.commands._common import ResultOutput, result_output
from fabtune.errors import ConfigError, ParseError
from fabtune.perf.parsers import (
    dcb,
    ethtool,
    ibdev2netdev,
    ibstat,
    mlnx_qos,
    nccl_debug,
    nccl_tests,
    perftest,
    show_gids,
    topo,
)

PARSERS: dict[str, Callable[[str], Any]] = {
    "ib_write_bw": perftest.parse,
    "ib_read_bw": perftest.parse,
    "ib_send_bw": perftest.parse,
    "nccl-tests": nccl_tests.parse,
    "nccl-debug": nccl_debug.parse,
    "topo": topo.parse,
    "mlnx_qos": mlnx_qos.parse,
    "show_gids": show_gids.parse,
    "ibstat": ibstat.parse,
    "ibdev2netdev": ibdev2netdev.parse,
    "ethtool": ethtool.parse,
    "dcb": dcb.parse,
}


# Parsers that read a stream line by line (any size); the others get the text, at most MAX_TEXT_CHARS.
STREAM_PARSERS: dict[str, Callable[[TextIO], Any]] = {"nccl-tests": nccl_tests.parse_stream}
MAX_TEXT_CHARS = 16 * 1024 * 1024
MAX_TABLE_ROWS = 200  # rows shown per table; --json prints every row


@click.command("parse")
@click.argument("tool", type=click.Choice(sorted(PARSERS)))
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@result_output()
def parse(tool: str, file: str, output: ResultOutput) -> None:
    """Parse saved output of TOOL from FILE ('-' reads standard input)."""
    with _open(file) as stream:
        streaming = STREAM_PARSERS.get(tool)
        try:
            record = streaming(stream) if streaming else PARSERS[tool](_read(file, stream))
        except ParseError as err:  # name the input: the parser knows only the text
            raise ParseError(f"{'standard input' if file == '-' else file}: {err}") from err
    console = output.console()
    for renderable in _render(record):
        console.print(renderable, highlight=False)
    output.write(json.loads(json.dumps(dataclasses.asdict(record), default=str)))


@contextlib.contextmanager
def _open(file: str) -> Iterator[TextIO]:
    if file == "-":
        yield sys.stdin
        return
    try:
        stream = Path(file).open(encoding="utf-8", errors="replace")  # noqa: SIM115 (closed below)
    except OSError as err:
        raise ConfigError(file, [f"FILE: cannot read {file!r}: {err.strerror or err}"]) from err
    with stream:
        yield stream


def _read(file: str, stream: TextIO) -> str:
    try:
        text = stream.read(MAX_TEXT_CHARS + 1)
    except OSError as err:
        raise ConfigError(file, [f"FILE: cannot read {file!r}: {err.strerror or err}"]) from err
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(file, [f"FILE: {file!r} is longer than {MAX_TEXT_CHARS} characters"])
    return text


def _render(record: Any) -> list[Any]:
    renderers: list[tuple[type[Any], Callable[[Any], list[Any]]]] = [
        (perftest.PerftestResult, _perftest),
        (nccl_tests.NcclTestsResult, _nccl_tests),
        (nccl_debug.NcclDebugSummary, _nccl_debug),
        (topo.TopoMatrix, _topo),
        (mlnx_qos.MlnxQos, _mlnx_qos),
        (show_gids.ShowGids, _show_gids),
        (ibstat.IbStat, _ibstat),
        (ibdev2netdev.IbDev2NetDev, _ibdev2netdev),
        (ethtool.EthtoolStats, _ethtool),
        (dcb.DcbShow, _dcb),
    ]
    for kind, renderer in renderers:
        if isinstance(record, kind):
            return renderer(record)
    return [repr(record)]


def _alert(label: str, message: str) -> Text:
    return Text.assemble((label, "bold red"), message)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    shown = rows[:MAX_TABLE_ROWS]
    more = len(rows) > len(shown)
    caption = f"first {len(shown)} of {len(rows)} rows (--json prints all)" if more else None
    table = Table(title=title, caption=caption)
    for column in columns:
        table.add_column(column)
    for row in shown:
        table.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    return table


def _perftest(result: perftest.PerftestResult) -> list[Any]:
    header = result.header
    rows: list[list[Any]]
    lines: list[Any] = [
        Text(
            f"{header.test or 'perftest'}: device {header.device}, link {header.link_type}, "
            f"qps {header.num_qps}, mtu {header.mtu}, gid index {header.gid_index}"
        )
    ]
    if result.error is not None:
        lines.append(_alert(f"error ({result.error.kind}): ", "; ".join(result.error.messages)))
    if result.bw_rows:
        unit = result.unit or "?"
        rows = [[r.bytes, r.iterations, r.bw_peak, r.bw_average, r.msg_rate_mpps]
                for r in result.bw_rows]
        lines.append(_table("bandwidth", ["bytes", "iterations", f"peak [{unit}]",
                                          f"average [{unit}]", "Mpps"], rows))
    if result.lat_rows:
        rows = [[r.bytes, r.iterations, r.t_min, r.t_avg, r.t_max, r.p99]
                for r in result.lat_rows]
        lines.append(_table("latency [usec]", ["bytes", "iterations", "min", "avg", "max", "p99"],
                            rows))
    return lines


def _nccl_tests(result: nccl_tests.NcclTestsResult) -> list[Any]:
    lines: list[Any] = [f"{len(result.devices)} ranks listed, {len(result.rows)} rows"]
    rows = [[r.size_bytes, r.type, r.redop, r.out_of_place.time_us, r.out_of_place.busbw_gbps,
             r.in_place.time_us, r.in_place.busbw_gbps] for r in result.rows]
    if rows:
        lines.append(_table("nccl-tests", ["bytes", "type", "redop", "oop us", "oop busbw",
                                           "ip us", "ip busbw"], rows))
    if result.avg_busbw_gbps is not None:
        lines.append(f"avg bus bandwidth: {result.avg_busbw_gbps} GB/s")
    lines.extend(_alert(f"{f.kind} failure ", f"on {f.host} at {f.where}: {f.message}")
                 for f in result.failures)
    return lines


def _nccl_debug(summary: nccl_debug.NcclDebugSummary) -> list[Any]:
    rows: list[list[Any]] = [
        ["NCCL version", summary.version],
        ["networks", ", ".join(summary.networks)],
        ["IB/RoCE devices", ", ".join(f"{d.name}:{d.port}/{d.link_layer}"
                                      for d in summary.ib_devices)],
        ["socket interfaces", ", ".join(summary.socket_interfaces)],
        ["transports", ", ".join(summary.transports)],
        ["GPUDirect RDMA", summary.gdrdma],
        ["socket fallback", summary.socket_fallback],
        ["GID index", summary.gid_index],
        ["traffic class", summary.traffic_class],
        ["warnings", len(summary.warnings)],
    ]
    return [_table("NCCL debug summary", ["item", "value"], rows)]


def _topo(matrix: topo.TopoMatrix) -> list[Any]:
    rows = [[label, *(cells.get(c) for c in matrix.columns)] for label, cells in
            matrix.cells.items()]
    return [_table("nvidia-smi topo -m", ["", *matrix.columns], rows)]


def _mlnx_qos(qos: mlnx_qos.MlnxQos) -> list[Any]:
    rows = [[tc.tc, tc.tsa, tc.bw_percent, tc.ratelimit_gbps or "unlimited",
             " ".join(map(str, tc.priorities))] for tc in qos.tcs]
    return [
        Text(
            f"DCBX {qos.dcbx_mode}, trust {qos.trust}, PFC on priorities "
            f"{list(qos.pfc_priorities)}"
        ),
        _table("traffic classes", ["tc", "tsa", "bw %", "rate", "priorities"], rows),
    ]


def _show_gids(gids: show_gids.ShowGids) -> list[Any]:
    rows = [[g.device, g.port, g.index, g.gid, g.ipv4, g.version, g.netdev]
            for g in gids.entries]
    return [_table("GIDs", ["dev", "port", "index", "gid", "ipv4", "ver", "netdev"], rows)]


def _ibstat(stat: ibstat.IbStat) -> list[Any]:
    rows = [[ca.name, p.port, p.state, p.physical_state, p.rate, p.link_layer]
            for ca in stat.cas for p in ca.ports]
    lines: list[Any] = [_table("ibstat", ["CA", "port", "state", "physical", "rate", "link"],
                               rows)]
    lines.extend(_alert("ibpanic: ", e) for e in stat.errors)
    return lines


def _ibdev2netdev(mapping: ibdev2netdev.IbDev2NetDev) -> list[Any]:
    rows = [[e.device, e.port, e.netdev, "Up" if e.up else "Down"] for e in mapping.entries]
    return [_table("ibdev2netdev", ["device", "port", "netdev", "state"], rows)]


def _ethtool(stats: ethtool.EthtoolStats) -> list[Any]:
    rows = [[name, value] for name, value in stats.counters.items()]
    return [_table("NIC statistics", ["counter", "value"], rows)]


def _dcb(show: dcb.DcbShow) -> list[Any]:
    rows: list[list[Any]] = [[k, v] for k, v in show.scalars.items()]
    rows.extend([k, " ".join(f"{a}:{b}" for a, b in v)] for k, v in show.arrays.items())
    if show.order is not None:
        rows.append(["order", " ".join(show.order)])
    return [_table("dcb", ["parameter", "value"], rows)]
