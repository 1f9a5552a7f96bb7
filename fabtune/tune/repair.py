"""The repair move: a host's own fault that a knob fixes, found when the baseline fails.

When every run of the baseline fails and the diagnosis by host (``bench/diagnose.py``) finds hosts
whose ``NCCL_IB_GID_INDEX`` names a RoCEv1 GID or no GID while their NICs carry a RoCEv2 IPv4 GID,
the loop's first move sets ``NCCL_IB_GID_INDEX`` to that GID's index on those hosts alone. It is
armed and journaled like every move; its decision is not statistical (there is no bandwidth to beat:
nothing ran): kept when the benchmark runs on the whole rack after it, rolled back otherwise. The
tuning loop then measures its baseline on the repaired rack. A host that no knob fixes (a NIC
without a RoCEv2 GID) stops the run at preflight, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fabtune.knobs import Change
from fabtune.perf.checks import CheckResult
from fabtune.perf.diagnose import Diagnosis

GROUP = "repair"
KNOB = "NCCL_IB_GID_INDEX"


@dataclass(frozen=True)
class Repair:
    """``NCCL_IB_GID_INDEX`` per host (the index of its RoCEv2 IPv4 GID), and the failed checks that
    call for it (the evidence)."""

    indexes: Mapping[str, int]
    evidence: tuple[CheckResult, ...]

    name = f"{KNOB} to the RoCEv2 GID"

    @property
    def hosts(self) -> list[str]:
        return sorted(self.indexes)

    def change(self, host: str) -> Change:
        """What the repair sets on ``host``."""
        return Change(nccl={KNOB: str(self.indexes[host])})

    @property
    def why(self) -> str:
        """Each host's fault as diagnosed, and the index it gets."""
        return "; ".join(
            f"{r.host}: {r.summary} -> {KNOB}={self.indexes[r.host]}"
            for r in self.evidence
            if r.host in self.indexes
        )


def repair_for(found: Diagnosis) -> Repair | None:
    """The repair of a failed job's hosts at fault, when a knob fixes every one of them; None when
    one is not fixable (the job would fail all the same: the run stops at preflight)."""
    if not found.at_fault or any(h not in found.gid_fixes for h in found.at_fault):
        return None
    evidence = tuple(r for r in found.results if r.host in found.at_fault and r.verdict == "fail")
    return Repair({h: found.gid_fixes[h] for h in found.at_fault}, evidence)


def kept_reason(hosts: int, all_reduce: float) -> str:
    """Why a repair is kept: the decision is "failed before, runs after", not a bandwidth gain."""
    return (
        f"repair: the benchmark failed before it and runs on all {hosts} hosts after it "
        f"(all_reduce {all_reduce:.1f} GB/s); a repair has no bandwidth baseline to beat"
    )


def failed_reason(why: str) -> str:
    """Why a repair is rolled back: the benchmark still fails."""
    return f"repair: the benchmark still fails after it: {why}"
