"""``fabtune advise -i INV``: measure the rack now, with the tune baseline's benchmark path
(facts, then all_reduce and alltoall batches through ``AnsibleBackend.measure``), under the
fabric's lock so no tune or apply changes the rack meanwhile. Nothing is changed and nothing is
journaled: the numbers go straight into the advice."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabtune.advise.measured import Measured, nic_gbytes, qps_of
from fabtune.errors import BenchmarkError
from fabtune.inventory import read_inventory
from fabtune.lock import fabric_lock
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.measure import Batch

REPETITIONS = 3


def from_batch(
    kind: str, facts: Mapping[str, Mapping[str, Any]], batch: Batch, gpus: int | None = None
) -> Measured:
    """The advisor's measurements from one benchmark batch and the hosts' facts."""
    if not batch.samples:
        why = "; ".join(f.summary for f in batch.failures[:3]) or "no repetition gave a result"
        raise BenchmarkError(f"advise -i: the rack could not be measured: {why}")
    ports = {h: (f.get("hardware") or {}).get("ports") or [] for h, f in facts.items()}
    return Measured(
        run_id="(measured now)",
        kind="ib" if kind == "ib" else "roce",
        nodes=len(facts),
        phase="probe",
        all_reduce=statistics.median(s.all_reduce for s in batch.samples),
        alltoall=statistics.median(s.alltoall for s in batch.samples),
        nic_gbytes=nic_gbytes(ports),
        qps=qps_of(facts),
        gpus=gpus,
        warnings=tuple(f"{c.verdict}: {c.check} on {c.host}: {c.summary}" for c in batch.transport
                       if c.verdict in ("fail", "warn")),
    )


def measure_rack(inventory: Path, repetitions: int = REPETITIONS) -> Measured:
    """Measure the rack of ``inventory`` now (read-only; under the fabric's lock)."""
    info = read_inventory(inventory)
    with fabric_lock(info.name, "advise"):
        backend = AnsibleBackend(info)
        facts = backend.facts()
        backend.learn(facts)
        batch = backend.measure(repetitions)
    return from_batch(info.fabric, facts, batch, backend.gpus or None)
