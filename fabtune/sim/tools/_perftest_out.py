"""perftest's text output: banner, ``ctx_print_test_info()`` header, address lines and BW table.

Formats from perftest ``perftest_parameters.{c,h}`` (formats.md §1.3) and the fixtures: the header
as perftest 6.x prints it (``PCIe relax order`` and ``ibv_wr* API`` lines), ``REPORT_FMT``
`` %-7lu    %-10lu       %-7.2lf            %-7.2lf\\t\\t   %-7.6lf`` and ``REPORT_FMT_EXT`` when a
Gb/s average is below 0.1.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from fabtune.sim.tools._perftest_args import PerftestArgs

RESULT_LINE = "-" * 87
BANNER = ("", "************************************", "* Waiting for client to connect... *",
          "************************************")
TEST_NAMES = {"ib_write_bw": "RDMA_Write", "ib_read_bw": "RDMA_Read", "ib_send_bw": "Send"}
PEAK_WARNING = " WARNING: BW peak won't be measured in this run."
MAX_PEAK_ITERS = 20000


@dataclasses.dataclass(frozen=True)
class Side:
    """One end as the other end learns it in the out-of-band exchange."""

    host: str
    dev: str
    nic_index: int
    link_layer: str
    lid: int
    gid: str
    qpns: tuple[int, ...]
    psns: tuple[int, ...]
    rkey: int
    vaddr: int
    mtu: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Side:
        """Rebuild from :meth:`to_dict`."""
        data = dict(raw)
        data["qpns"] = tuple(int(v) for v in raw["qpns"])
        data["psns"] = tuple(int(v) for v in raw["psns"])
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Row:
    """One result row: size, iterations and the average rate in Gb/s (payload)."""

    size: int
    iters: int
    gbps: float


def c_hex(value: int, width: int) -> str:
    """C's ``%#0<width>x`` (no ``0x`` prefix for zero)."""
    if value == 0:
        return "0" * width
    return f"{value:#0{width}x}"


def gid_decimal(gid: str) -> str:
    """A sysfs GID (``0000:...:0a00:010b``) as perftest's ``PERF_GID_FMT`` (16 ``%02d`` bytes)."""
    raw = bytes.fromhex(gid.replace(":", ""))
    return ":".join(f"{b:02d}" for b in raw)


def cq_moderation(args: PerftestArgs) -> int:
    """``CQ Moderation``: 100, forced to 1 for sizes above 8 KiB unless ``-a``."""
    return 1 if args.size > 8192 and not args.all_sizes else 100


def header(args: PerftestArgs, local: Side, gid_index: int | None) -> list[str]:
    """``ctx_print_test_info()``: the header block, framed by RESULT_LINEs."""
    server = args.is_server
    title = f"{TEST_NAMES[args.prog]} {'Bidirectional ' if args.bidirectional else ''}BW Test"
    link = "IB" if local.link_layer == "InfiniBand" else "Ethernet"
    lines = [RESULT_LINE, " " * 20 + title,
             f" Dual-port       : OFF\t\tDevice         : {local.dev}",
             f" Number of qps   : {args.qps}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             " PCIe relax order: ON", " ibv_wr* API     : ON"]
    if not server or args.bidirectional:
        lines.append(f" TX depth        : {args.tx_depth}")
    if args.prog == "ib_send_bw" and (server or args.bidirectional):
        lines.append(" RX depth        : 512")
    lines += [f" CQ Moderation   : {cq_moderation(args)}", f" Mtu             : {local.mtu}[B]",
              f" Link type       : {link}"]
    if gid_index is not None:
        lines.append(f" GID index       : {gid_index}")
    lines.append(" Outstand reads  : 16" if args.prog == "ib_read_bw" else " Max inline data : 0[B]")
    lines.append(f" rdma_cm QPs\t : {'ON' if args.rdma_cm else 'OFF'}")
    return lines + _data_ex(args)


def _data_ex(args: PerftestArgs) -> list[str]:
    method = "rdma_cm" if args.rdma_cm or args.comm_rdma_cm else "Ethernet"
    line = f" Data ex. method : {method}"
    if args.rdma_cm and args.tos is not None:
        line += f" \tTOS    : {args.tos}"
    if args.rdma_cm and args.is_server:
        return [line, RESULT_LINE, " Waiting for client rdma_cm QP to connect",
                " Please run the same command with the IB/RoCE interface IP", RESULT_LINE]
    return [line, RESULT_LINE]


def addresses(args: PerftestArgs, side: Side, which: str) -> list[str]:
    """One ``local``/``remote`` address line per QP (plus ``GID:`` on RoCE)."""
    lines = []
    for qpn, psn in zip(side.qpns, side.psns, strict=True):
        text = f" {which} address: LID {c_hex(side.lid, 4)} QPN {c_hex(qpn, 6)} PSN {c_hex(psn, 6)}"
        if args.prog == "ib_read_bw":
            text += " OUT 0x10"
        if args.prog != "ib_send_bw" and not args.rdma_cm:
            text += f" RKey {c_hex(side.rkey, 8)} VAddr {c_hex(side.vaddr, 16)}"
        lines.append(text)
        if side.link_layer != "InfiniBand":
            lines.append(f" GID: {gid_decimal(side.gid)}")
    return lines


def measures_peak(args: PerftestArgs) -> bool:
    """False when perftest prints ``0.00`` as the peak (``-D``, ``-N``, > 20000 iterations)."""
    return not (args.duration is not None or args.no_peak or args.iters > MAX_PEAK_ITERS)


def table_header(args: PerftestArgs) -> list[str]:
    """The RESULT_LINE and ``RESULT_FMT``/``RESULT_FMT_G`` line."""
    unit = "Gb/sec" if args.report_gbits else "MiB/sec"
    return [RESULT_LINE,
            f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"]


def scaled(args: PerftestArgs, gbps: float) -> float:
    """A Gb/s figure in the report's unit (Gb/s, or MiB/s = 2**20 B/s)."""
    return gbps if args.report_gbits else gbps * 1e9 / 8 / 2**20


def row_values(args: PerftestArgs, row: Row) -> tuple[float, float, float]:
    """(peak, average, Mpps) of one row in the report's unit."""
    avg = scaled(args, row.gbps)
    peak = avg * 1.0015 if measures_peak(args) else 0.0
    mpps = row.gbps * 1e9 / 8 / max(row.size, 1) / 1e6
    return peak, avg, mpps


def format_row(args: PerftestArgs, row: Row) -> str:
    """``REPORT_FMT`` (or ``REPORT_FMT_EXT`` for a Gb/s average below 0.1)."""
    peak, avg, mpps = row_values(args, row)
    if args.report_gbits and avg < 0.1:
        return f" {row.size:<7d}    {row.iters:d}           {peak:<7.6f}            {avg:<7.6f}" \
               f"            {mpps:<7.6f}"
    return f" {row.size:<7d}    {row.iters:<10d}       {peak:<7.2f}            {avg:<7.2f}\t\t   {mpps:<7.6f}"


def json_report(args: PerftestArgs, local: Side, gid_index: int | None, rows: list[Row]) -> str:
    """The ``--out_json`` report: ``test_info`` (header keys) and ``results``."""
    info: dict[str, Any] = {
        "test": f"{TEST_NAMES[args.prog]} BW Test", "Device": local.dev, "Number_of_qps": args.qps,
        "Transport_type": "IB", "Connection_type": "RC", "Mtu": local.mtu,
        "Link_type": "IB" if local.link_layer == "InfiniBand" else "Ethernet",
        "unit": "Gb/sec" if args.report_gbits else "MiB/sec",
    }
    if gid_index is not None:
        info["GID_index"] = gid_index
    results = []
    for row in rows:
        peak, avg, mpps = row_values(args, row)
        results.append({"MsgSize": row.size, "n_iterations": row.iters, "BW_peak": round(peak, 6),
                        "BW_average": round(avg, 6), "MsgRate": round(mpps, 6)})
    doc = {"test_info": info, "results": results[0] if len(results) == 1 else results}
    return json.dumps(doc, indent=4) + "\n"


def write_json_report(args: PerftestArgs, local: Side, gid_index: int | None, rows: list[Row]) -> None:
    """Write ``--out_json`` to ``--out_json_file`` (default ``perftest_out.json``)."""
    Path(args.out_json_file).write_text(json_report(args, local, gid_index, rows))
