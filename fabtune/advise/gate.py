"""The ``--min-mfu`` gate of ``fabtune bootstrap``: after the rack is accepted, the job's predicted
MFU at the target size (from the run's own acceptance busbw, on the fabric the rack has) must reach
the threshold, or the bootstrap fails with the reason."""

from __future__ import annotations

from dataclasses import dataclass

from fabtune.advise import fabric
from fabtune.advise.advise import predict
from fabtune.advise.job import JobSpec, fit
from fabtune.advise.measured import Measured
from fabtune.advise.model import StepTime


@dataclass(frozen=True)
class GateResult:
    """The job's predicted step at the target size, and whether it meets ``--min-mfu``."""

    nodes: int
    option: str
    per_gpu: float
    step: StepTime
    min_mfu: float | None

    @property
    def passed(self) -> bool:
        return self.min_mfu is None or self.step.mfu >= self.min_mfu

    def line(self) -> str:
        """One line: the predicted MFU and where the step goes; the threshold when one was set."""
        s = self.step
        nvlink = (s.tp_s + s.pp_s + s.ep_s + s.dp_exposed_s - s.fabric_s) / s.step_s
        where = (
            f"compute {s.compute_s / s.step_s:.0%}, bubble {s.bubble_s / s.step_s:.0%}, "
            f"fabric {s.fabric_share:.0%}, NVLink {nvlink:.0%}"
        )
        verdict = ""
        if self.min_mfu is not None:
            verdict = f" ({'meets' if self.passed else 'below'} --min-mfu {self.min_mfu:.0%})"
        return (
            f"predicted MFU at N={self.nodes} on {self.option}: {s.mfu:.1%}{verdict}; per-GPU fabric "
            f"bandwidth {self.per_gpu:.1f} GB/s; step {s.step_s:.3f} s: {where}"
        )


def gate(job: JobSpec, measured: Measured, nodes: int, min_mfu: float | None,
         topo: fabric.Topology | None = None) -> GateResult:
    """The job at ``nodes`` on the measured fabric (RoCE as tuned, or InfiniBand)."""
    fit(job, nodes)
    name = "ib-ndr" if measured.kind == "ib" else "roce"
    option = next(o for o in fabric.options(measured.qps) if o.name == name)
    per_gpu, step = predict(job, measured, option, topo or fabric.Topology(), nodes)
    return GateResult(nodes, name, per_gpu, step, min_mfu)
