"""What the advisor takes from the rack: per-GPU bus bandwidths measured by a saved run.

A tune run journals its baseline and final batches (all_reduce and alltoall busbw samples, GB/s,
nccl-tests at 8 GiB and 1 GiB) and the facts (hosts, fabric type, ports and their line rates); a
bootstrap run journals its acceptance busbw (all_reduce). The tuned state (the final batch) is
preferred; the baseline stands in when the run did not finish.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.errors import ConfigError, FabtuneError
from fabtune.inventory import read_inventory
from fabtune.journal import Journal, Step

_RATE = re.compile(r"^\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec")


@dataclass(frozen=True)
class Measured:
    """The rack's measurements, as the advisor reads them."""

    run_id: str
    kind: str  # roce | ib
    nodes: int
    phase: str  # final | baseline | acceptance | probe
    all_reduce: float  # busbw GB/s, median of the samples
    alltoall: float | None  # busbw GB/s, median; None when not measured
    nic_gbytes: float | None  # one node's RDMA ports' line rate, GB/s (None when unknown)
    qps: int  # NCCL_IB_QPS_PER_CONNECTION of the measured state (1: NCCL's default)
    gpus: int | None = None  # the rack's GPUs per node, when known (else the job's)
    warnings: tuple[str, ...] = ()  # the run's failed or warning checks (affinity, transport, ...)

    def per_gpu(self, gpus_per_node: int) -> float:
        """One GPU's share of its node's fabric bandwidth: all_reduce busbw / GPUs per node of the
        rack (ring all-reduce over nodes: busbw = rails x per-rail goodput, calibration.md 2b)."""
        return self.all_reduce / (self.gpus or gpus_per_node)

    def alltoall_per_gpu(self, gpus_per_node: int) -> float:
        """alltoall busbw is per GPU already; the all_reduce share stands in when not measured."""
        return self.alltoall if self.alltoall is not None else self.per_gpu(gpus_per_node)


def _floats(raw: Any) -> list[float]:
    return [float(v) for v in raw or [] if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]


def nic_gbytes(ports: Mapping[str, Any]) -> float | None:
    """The slowest node's RDMA line rate in GB/s (sum of its ports' sysfs rates)."""
    per_node = []
    for host_ports in ports.values():
        rates = [_RATE.match(str(p.get("rate") or "")) for p in host_ports or [] if isinstance(p, Mapping)]
        total = sum(float(m["gbps"]) for m in rates if m) / 8
        if total > 0:
            per_node.append(total)
    return min(per_node) if per_node else None


def qps_of(state: Mapping[str, Any] | None) -> int:
    values = set()
    for host in (state or {}).values():
        raw = ((host or {}).get("nccl") or {}).get("NCCL_IB_QPS_PER_CONNECTION")
        if raw is not None and str(raw).isdigit():
            values.add(int(str(raw)))
    return min(values) if values else 1


def check_warnings(steps: Sequence[Step]) -> tuple[str, ...]:
    """The run's checks that did not pass (a TCP fallback or a cross-socket NIC makes the measured
    busbw say little about the fabric), as ``check on host: summary``."""
    out = []
    for s in steps:
        for c in (s.payload.get("checks") or []) if s.kind == "phase" else []:
            if isinstance(c, Mapping) and c.get("verdict") in ("fail", "warn"):
                out.append(f"{c.get('verdict')}: {c.get('check')} on {c.get('host')}: {c.get('summary')}")
    return tuple(dict.fromkeys(out))


def _phase(steps: Sequence[Step], name: str) -> Step | None:
    done = [s for s in steps if s.kind == "phase" and s.name == name and s.state == "done"]
    return done[-1] if done else None


PHASES = ("final", "baseline", "acceptance")


def from_steps(run_id: str, run_kind: str, fabric_type: str | None, steps: Sequence[Step],
               phases: Sequence[str] = PHASES) -> Measured:
    """The measurements of one journaled run, from the first of ``phases`` that holds one;
    ConfigError naming the run when none does."""
    source = f"run {run_id}"
    facts = _phase(steps, "facts") or _phase(steps, "preflight")
    hosts = list((facts.payload.get("hosts") if facts else None) or [])
    kind = str((facts.payload.get("fabric_type") if facts else None) or fabric_type or "roce")
    nic = nic_gbytes((facts.payload.get("ports") if facts else None) or {})
    for name in phases:
        step = _phase(steps, name)
        if step is None:
            continue
        p = step.payload
        ar = _floats(p.get("all_reduce")) or _floats([p.get("busbw_gbytes")])
        if not ar:
            continue
        aa = _floats(p.get("alltoall"))
        if len(hosts) < 2:
            break
        return Measured(
            run_id=run_id,
            kind="ib" if kind == "ib" else "roce",
            nodes=len(hosts),
            phase=name,
            all_reduce=statistics.median(ar),
            alltoall=statistics.median(aa) if aa else None,
            nic_gbytes=nic,
            qps=qps_of(p.get("state")),
            warnings=check_warnings(steps),
        )
    why = (
        f"a {run_kind} run over {len(hosts)} host: the per-GPU bandwidth needs a measurement across 2+ nodes"
        if 0 < len(hosts) < 2
        else f"a {run_kind} run with no finished all_reduce measurement (baseline, final or acceptance)"
    )
    raise ConfigError(source, [f"--from: {why}"])


def from_run(journal: Journal, run_id: str) -> Measured:
    """The measurements of saved run ``run_id`` (tune or bootstrap)."""
    run = journal.run(run_id)
    if run.kind not in ("tune", "bootstrap"):
        why = f"--from: a {run.kind} run measures no bandwidth (give a tune or bootstrap run)"
        raise ConfigError(f"run {run_id}", [why])
    return from_steps(run_id, run.kind, _inventory_fabric(run.inventory), journal.steps(run_id))


def _inventory_fabric(inventory: str) -> str | None:
    """The fabric type of the run's inventory (a bootstrap journals none of its own); None when the
    inventory is gone or no longer reads."""
    try:
        return read_inventory(Path(inventory)).fabric if inventory and Path(inventory).is_file() else None
    except FabtuneError:
        return None
