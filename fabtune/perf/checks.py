"""Fabric checks practitioners run by hand, each a pass/warn/fail verdict with its evidence line.

Pure functions over parsed tool output (``fabtune.perf.parsers``): topology, NCCL transport,
GID tables, link state and the subnet manager.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from fabtune.perf.parsers.ibstat import IbStat
from fabtune.perf.parsers.nccl_debug import NcclDebugSummary
from fabtune.perf.parsers.show_gids import ShowGids
from fabtune.perf.parsers.topo import TopoMatrix

Verdict = Literal["pass", "warn", "fail"]
GOOD_DISTANCES = ("X", "PIX", "PXB")
WEAK_DISTANCES = ("PHB",)


@dataclass(frozen=True)
class CheckResult:
    """One check on one host (or ``*`` for the whole rack)."""

    check: str
    host: str
    verdict: Verdict
    summary: str
    evidence: str = ""


def _line_with(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if all(n in line for n in needles):
            return line.strip()
    return ""


def affinity(
    host: str, matrix: TopoMatrix, pairs: Sequence[tuple[int, str]], raw: str = ""
) -> list[CheckResult]:
    """GPU-NIC pairs in use must share a PCIe switch (PIX/PXB); NODE and SYS cross host bridges or sockets."""
    results = []
    for gpu, nic in pairs:
        distance = matrix.distance(gpu, nic)
        verdict: Verdict = (
            "pass" if distance in GOOD_DISTANCES else "warn" if distance in WEAK_DISTANCES else "fail"
        )
        evidence = _line_with(raw, f"GPU{gpu}") if raw else f"GPU{gpu} {nic}: {distance}"
        results.append(CheckResult("affinity", host, verdict, f"GPU{gpu} <-> {nic}: {distance}", evidence))
    return results


def transport(host: str, summary: NcclDebugSummary, raw: str, *, expect_gdr: bool = True) -> CheckResult:
    """NCCL must use NET/IB (RoCE or IB), with GPUDirect RDMA where expected, and never NET/Socket."""
    if summary.ib_no_device or summary.socket_fallback:
        return _fallback(host, summary, raw)
    # Channel transports read "NET/IB" ("NET/IBext_v8" through NVIDIA's net plugin); networks "IB".
    ib = [c for c in summary.channels if c.transport.startswith("NET/IB")]
    if not ib and not any(n.startswith("IB") for n in summary.networks):
        return CheckResult(
            "transport",
            host,
            "warn",
            "no inter-node NCCL transport seen in the log",
            _line_with(raw, "NCCL INFO"),
        )
    if expect_gdr and ib and not any(c.gdrdma for c in ib):
        return CheckResult(
            "transport",
            host,
            "warn",
            "NET/IB without GPUDirect RDMA (staged through host memory)",
            _line_with(raw, "via NET/IB"),
        )
    layers = sorted({d.link_layer for d in summary.ib_devices}) or ["IB"]
    return CheckResult(
        "transport",
        host,
        "pass",
        f"NET/IB over {'/'.join(layers)}",
        _line_with(raw, "via NET/IB") or _line_with(raw, "NET/IB : Using"),
    )


def _fallback(host: str, summary: NcclDebugSummary, raw: str) -> CheckResult:
    """A TCP fallback, with the line that shows its cause on this host when there is one."""
    if summary.env.get("NCCL_IB_DISABLE") == "1":
        return CheckResult(
            "transport",
            host,
            "fail",
            "TCP fallback: NCCL_IB_DISABLE=1 on this host",
            _line_with(raw, "NCCL_IB_DISABLE set by environment to 1"),
        )
    if summary.ib_no_device:
        return CheckResult(
            "transport",
            host,
            "fail",
            "TCP fallback: no usable RDMA device on this host",
            _line_with(raw, "NET/IB : No device found"),
        )
    evidence = _line_with(raw, "via NET/Socket") or _line_with(raw, "Using network Socket")
    return CheckResult(
        "transport", host, "fail", "TCP fallback: NCCL uses NET/Socket (the job fell back)", evidence
    )


def rocev2_index(table: ShowGids, device: str) -> int | None:
    """The GID index of ``device``'s RoCEv2 IPv4 GID, or None."""
    for entry in table.entries:
        if entry.device == device and entry.version == "v2" and entry.ipv4:
            return entry.index
    return None


def gid_index(tables: Mapping[str, ShowGids], devices: Sequence[str]) -> list[CheckResult]:
    """Every host must carry its RoCEv2 IPv4 GID at one index (the one NCCL_IB_GID_INDEX names)."""
    found = {(h, d): rocev2_index(t, d) for h, t in tables.items() for d in devices}
    common, _ = (
        Counter(v for v in found.values() if v is not None).most_common(1)[0]
        if any(v is not None for v in found.values())
        else (None, 0)
    )
    results = []
    for (host, dev), index in sorted(found.items()):
        if index is None:
            results.append(CheckResult("gid_index", host, "fail", f"{dev}: no RoCEv2 IPv4 GID", ""))
        elif index != common:
            results.append(
                CheckResult(
                    "gid_index",
                    host,
                    "fail",
                    f"{dev}: RoCEv2 GID at index {index}, the rack uses {common}",
                    f"{dev} port 1 index {index} v2",
                )
            )
    if not results:
        results.append(CheckResult("gid_index", "*", "pass", f"RoCEv2 GID index {common} on every host"))
    return results


def _gbps(rate: str | None) -> float:
    """The number of an ibstat ``Rate:`` (``200``, ``56 (FDR10)``, ``2.5``); 0 when unreadable."""
    try:
        return float((rate or "").split()[0])
    except (ValueError, IndexError):
        return 0.0


def rack_rate(stats: Mapping[str, IbStat]) -> str | None:
    """The rate most ports run at (a tie goes to the higher: a port trains low, never high)."""
    rates = Counter(p.rate for s in stats.values() for ca in s.cas for p in ca.ports)
    return max(rates, key=lambda r: (rates[r], _gbps(r))) if rates else None


def _slow_port(host: str, ca: str, port: int, rate: str | None, usual: str | None) -> CheckResult:
    """A port at another rate than the rack's: below it, the port trained low (a bad cable or
    transceiver, a lane down) and every flow through it runs at that rate."""
    below = _gbps(rate) < _gbps(usual)
    why = (f"trained at {rate} Gb/s, below the rack's {usual} Gb/s (cable, transceiver or lanes)"
           if below else f"runs at {rate} Gb/s, the rack at {usual}")
    evidence = f"CA '{ca}' Port {port}: Rate: {rate}"
    return CheckResult("link", host, "fail", f"{ca} port {port} {why}", evidence)


def links(stats: Mapping[str, IbStat], mtus: Mapping[str, Mapping[str, int]]) -> list[CheckResult]:
    """Ports Active/LinkUp, one rate across the rack, one MTU across the rack."""
    results = []
    usual_rate = rack_rate(stats)
    for host, stat in sorted(stats.items()):
        for ca in stat.cas:
            for port in ca.ports:
                if port.state != "Active" or port.physical_state != "LinkUp":
                    results.append(
                        CheckResult(
                            "link",
                            host,
                            "fail",
                            f"{ca.name} port {port.port} is {port.state}/{port.physical_state}",
                            f"State: {port.state}",
                        )
                    )
                elif port.rate != usual_rate:
                    results.append(_slow_port(host, ca.name, port.port, port.rate, usual_rate))
    all_mtus = Counter(m for per in mtus.values() for m in per.values())
    usual_mtu = all_mtus.most_common(1)[0][0] if all_mtus else None
    for host, per in sorted(mtus.items()):
        for dev, mtu in sorted(per.items()):
            if mtu != usual_mtu:
                results.append(
                    CheckResult(
                        "mtu", host, "fail", f"{dev} MTU {mtu}, the rack uses {usual_mtu}", f"{dev} mtu {mtu}"
                    )
                )
    if not results:
        results.append(
            CheckResult("link", "*", "pass", f"all ports Active at {usual_rate} Gb/s, MTU {usual_mtu}")
        )
    return results


def subnet_manager(host: str, sminfo_text: str, returncode: int) -> CheckResult:
    """An InfiniBand fabric needs a master subnet manager (sminfo answers SMINFO_MASTER)."""
    line = sminfo_text.strip().splitlines()[-1] if sminfo_text.strip() else ""
    if returncode == 0 and "SMINFO_MASTER" in sminfo_text:
        return CheckResult("subnet_manager", host, "pass", "a master SM answers", line)
    return CheckResult("subnet_manager", host, "fail", "no master subnet manager answers", line)
