"""nccl-tests' stdout (``src/util.cu``) and NCCL's ``NCCL_DEBUG=INFO`` lines (formats.md §2.2, §3)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fabtune.sim.model.results import SizeResult

NCCL_TESTS_VERSION = "2.17.1"
NCCL_VERSION = "2.26.2+cuda12.8"
NCCL_CODE = 22602
INT_PARAMS = frozenset({
    "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SL", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_CROSS_NIC", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_NET_GDR_READ", "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_ROCE_VERSION_NUM",
})
"""Parameters NCCL reads as integers (echoed ``... set by environment to %lld.``)."""
QUIET_PARAMS = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})


@dataclasses.dataclass(frozen=True)
class Device:
    """One GPU rank of the job as its device line shows it."""

    rank: int
    pid: int
    host: str
    dev: int
    bus: str
    name: str


def float_str(value: float, width: int) -> str:
    """nccl-tests ``getFloatStr``: 2 decimals, else 1, else 0, else an exponent, within ``width``."""
    for fmt in (f"{{:>{width}.2f}}", f"{{:>{width}.1f}}", f"{{:>{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return f"{value:>{width}.1e}" if width >= 7 else f"{value:>{width}.0e}"


def bus_id(pci: str) -> str:
    """``0000:18:00.0`` as nccl-tests prints it: ``[%04x:%02x:%02x]`` -> ``0000:18:00``."""
    domain, bus, rest = pci.split(":")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"


def header(prog: str, *, n_threads: int, n_gpus: int, min_bytes: int, max_bytes: int, step: str,
           iters: tuple[int, int, int], check: int) -> list[str]:
    """The lines before ``# Using devices`` (``writeDeviceReport``)."""
    warmup, n_iters, agg = iters
    return [
        f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_CODE} nccl-library={NCCL_CODE}",
        f"# Collective test starting: {prog}",
        f"# nThread {n_threads} nGpus {n_gpus} minBytes {min_bytes} maxBytes {max_bytes} step: {step}"
        f" warmup iters: {warmup} iters: {n_iters} agg iters: {agg} validation: {check} graph: 0"
        " unalign: 0",
        "#",
    ]


def device_lines(devices: Sequence[Device]) -> list[str]:
    """``# Using devices`` and one line per rank (rank order)."""
    lines = ["# Using devices"]
    for d in devices:
        lines.append(f"#  Rank {d.rank:2d} Group {0:2d} Pid {d.pid:6d} on {d.host:>10s} device {d.dev:2d}"
                     f" [{bus_id(d.bus)}] {d.name}")
    return lines


def table_header() -> list[str]:
    """``writeResultHeader`` without timestamps or per-iteration columns."""
    blank = f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
    return [
        "#",
        blank + "           out-of-place                       in-place          ",
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}"
        f"  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}"
        f"  {'#wrong':>6s} ",
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}"
        f"  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}"
        f"  {'':>6s} ",
    ]


def _body(r: SizeResult, check: bool) -> str:
    wrong = f"{0:6g}" if check else "   N/A"
    return f"  {float_str(r.time_us, 7)}  {float_str(r.algbw, 6)}  {float_str(r.busbw, 6)}  {wrong}"


def row(out_of_place: SizeResult, in_place: SizeResult, count: int, redop: str, check: bool) -> str:
    """One table row (``writeBenchmarkLinePreamble`` + two ``writeBenchmarkLineBody``)."""
    pre = f"{out_of_place.size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {-1:6d}"
    return pre + _body(out_of_place, check) + _body(in_place, check)


def footer(prog: str, avg_busbw: float) -> list[str]:
    """``writeResultFooter`` (no ``NCCL_TESTS_MIN_BW`` check)."""
    return [
        f"# {'Out of bounds values':<20s} : 0 OK",
        f"# {'Avg bus bandwidth':<20s} : {avg_busbw:g} ",
        "#",
        f"# Collective test concluded: {prog}",
        "#",
    ]


def env_lines(env: Sequence[tuple[str, str]]) -> list[str]:
    """NCCL's ``<VAR> set by environment to <value>[.]`` echoes of the NCCL variables it reads."""
    out = []
    for key, value in env:
        if key in QUIET_PARAMS:
            continue
        dot = "." if key in INT_PARAMS else ""
        out.append(f"{key} set by environment to {value}{dot}")
    return out
