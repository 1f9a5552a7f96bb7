"""The transport check by host: one code path for ``fabtune check`` and the benchmark's preflight.

Each host is judged on its own NCCL log (``NCCL_DEBUG=INFO``: the network, the channels, the
variables it read, its WARN lines) and, where the host's tool output is at hand, its GID table
(``show_gids``). When the job failed, the hosts with a cause of their own (a GID index that names
a RoCEv1 GID or no GID at all, a TCP fallback) are the ones that fail; the others, whose runs failed
only through them, are told so (warn). When no host shows a cause, every host of the failed job
fails with the evidence its log holds: the benchmark cannot run on any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from fabtune.errors import ParseError
from fabtune.perf import checks, nccl
from fabtune.perf.checks import CheckResult
from fabtune.perf.fabric import HostView
from fabtune.perf.parsers import nccl_debug
from fabtune.perf.parsers.show_gids import ShowGids

CHECK = "transport"


@dataclass(frozen=True)
class GidTable:
    """A host's GID table as ``show_gids`` printed it: parsed, and the text (the evidence)."""

    table: ShowGids
    text: str


def _line(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if all(n in line for n in needles):
            return " ".join(line.split())
    return ""


def gid_row(text: str, device: str, index: int) -> str:
    """The ``show_gids`` row of ``device``'s GID ``index``, whitespace collapsed ("" when absent)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[0] == device and fields[2] == str(index):
            return " ".join(fields)
    return ""


def gid_cause(
    host: str, summary: nccl_debug.NcclDebugSummary, log: str, gids: GidTable | None, *, failed: bool
) -> CheckResult | None:
    """The host's own GID fault: ``NCCL_IB_GID_INDEX`` names no GID, or a RoCEv1 one, on a NIC NCCL uses.

    RoCEv1 frames carry no IP header: they do not pair with RoCEv2 peers and are not routed; the
    queue pairs time out ("completion with error 12", nccl#426, #769). A fault when the job failed,
    a warning when it ran (every host on v1, one L2 segment).
    """
    index = summary.gid_index
    if gids is None or index is None or index < 0:
        return None
    devices = _devices(summary, gids)
    verdict: checks.Verdict = "fail" if failed else "warn"
    echo = _line(log, "NCCL_IB_GID_INDEX set by environment")
    for dev in devices:
        entry = next((e for e in gids.table.entries if e.device == dev and e.index == index), None)
        v2 = checks.rocev2_index(gids.table, dev)
        where = f"; its RoCEv2 IPv4 GID is at index {v2}" if v2 is not None else ""
        if entry is None:
            return CheckResult(
                CHECK, host, verdict, f"NCCL_IB_GID_INDEX={index}: {dev} has no GID at index {index}{where}",
                echo,
            )
        if entry.version == "v1":
            return CheckResult(
                CHECK, host, verdict,
                f"NCCL_IB_GID_INDEX={index} names {dev}'s RoCEv1 GID: its queue pairs cannot reach "
                f"RoCEv2 peers{where}",
                gid_row(gids.text, dev, index),
            )
    return None


def _devices(summary: nccl_debug.NcclDebugSummary, gids: GidTable) -> tuple[str, ...]:
    """The RDMA devices NCCL uses on the host (``NCCL_IB_HCA``), else every device of its GID table."""
    return summary.hcas or tuple(dict.fromkeys(e.device for e in gids.table.entries))


def gid_fix(host: str, log: str, gids: GidTable | None) -> int | None:
    """The index ``NCCL_IB_GID_INDEX`` should name on a host whose own fault is its GID index: the
    one index at which every NIC NCCL uses there carries its RoCEv2 IPv4 GID. None when the fault is
    not the GID index, or when no one index fixes it (a NIC without a RoCEv2 IPv4 GID, NICs that
    carry it at different indexes: ``NCCL_IB_GID_INDEX`` is one value per process)."""
    try:
        summary = nccl_debug.parse(log)
    except ParseError:
        return None
    if gids is None or gid_cause(host, summary, log, gids, failed=True) is None:
        return None
    found = {checks.rocev2_index(gids.table, dev) for dev in _devices(summary, gids)}
    return found.pop() if len(found) == 1 and None not in found else None


def host_result(
    host: str, log: str, *, failed: bool, why: str = "", gids: GidTable | None = None
) -> tuple[CheckResult, bool]:
    """One host's transport verdict, and whether the cause is the host's own.

    Args:
        host: the host.
        log: its NCCL lines (``nccl.split_by_host``).
        failed: the job gave no result.
        why: the job's failure (exit status and last line), the evidence when the log has none.
        gids: the host's ``show_gids`` output, when read.
    """
    try:
        summary = nccl_debug.parse(log)
    except ParseError:
        evidence = why or "no NCCL_DEBUG=INFO line from this host"
        return CheckResult(CHECK, host, "fail", "no NCCL log from this host", evidence), False
    own = gid_cause(host, summary, log, gids, failed=failed)
    if own is not None:
        return own, own.verdict == "fail"
    judged = checks.transport(host, summary, log)
    if judged.verdict == "fail" or not failed:
        return judged, judged.verdict == "fail"
    if summary.warnings:
        warn = summary.warnings[0]
        return CheckResult(CHECK, host, "fail", f"NCCL error: {warn[:200]}", _line(log, "NCCL WARN")), False
    return CheckResult(CHECK, host, "fail", f"the benchmark failed here: {why}"[:300], why), False


@dataclass(frozen=True)
class Diagnosis:
    """Every host's transport check, the hosts whose own fault failed the job, and of those, the ones
    a knob fixes: their GID index points at a RoCEv1 GID or at none, and ``gid_fixes`` holds the
    index of their RoCEv2 IPv4 GID (``gid_fix``)."""

    results: list[CheckResult]
    at_fault: list[str]
    gid_fixes: dict[str, int] = field(default_factory=dict)


def diagnose_job(
    hosts: Sequence[str],
    output: str,
    *,
    failed: bool,
    why: str = "",
    gids: Mapping[str, GidTable | None] | None = None,
) -> Diagnosis:
    """Every host's transport check from a job's output (its NCCL log lines carry the host name).

    When the job failed and some hosts have a cause of their own, the other hosts' failures are
    consequences: they are reported as warnings naming the hosts at fault.
    """
    logs = nccl.split_by_host(output)
    tables = gids or {}
    judged = [host_result(h, logs.get(h, ""), failed=failed, why=why, gids=tables.get(h)) for h in hosts]
    at_fault = [r.host for r, own in judged if own]
    if not failed or not at_fault:
        return Diagnosis([r for r, _ in judged], at_fault)
    blamed = ", ".join(at_fault)
    results = [
        r if own or r.verdict != "fail"
        else replace(r, verdict="warn", summary=f"failed through {blamed}: {r.summary}")
        for r, own in judged
    ]
    fixes = {h: index for h in at_fault if (index := gid_fix(h, logs.get(h, ""), tables.get(h))) is not None}
    return Diagnosis(results, at_fault, fixes)


def transport_results(
    hosts: Sequence[str],
    output: str,
    *,
    failed: bool,
    why: str = "",
    gids: Mapping[str, GidTable | None] | None = None,
) -> list[CheckResult]:
    """:func:`diagnose_job`'s checks (what ``fabtune check`` and bootstrap report)."""
    return diagnose_job(hosts, output, failed=failed, why=why, gids=gids).results


def failure_line(rc: int | None, output: str) -> str:
    """A failed launch in one line: its exit status and nccl-tests' first ``Test NCCL failure``
    line, else the last line that is more than a separator (mpirun ends with dashed rules)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip().strip("-=#. ")]
    first = next((ln for ln in lines if "Test NCCL failure" in ln), None)
    return f"exit {rc}: {first or (lines[-1] if lines else 'no output')}"[:300]


def gid_tables(views: Mapping[str, HostView]) -> dict[str, GidTable | None]:
    """Each host's GID table from the fabric read (``fabtune.perf.fabric.read_hosts``)."""
    return {
        h: GidTable(v.gids, v.raw.get("gids", "")) if v.gids is not None else None for h, v in views.items()
    }
