"""The job gate of ``fabtune bootstrap`` and the job prediction of ``fabtune tune``: a training job's
predicted MFU at the target size from the run's own measured busbw, on the fabric the rack has.
After a bootstrap's acceptance it must reach ``--min-mfu``, or the bootstrap fails with the reason;
a tune run predicts it for its baseline and for its final (kept) state. Both are journaled
(:meth:`Goal.inputs`, :meth:`GateResult.record`), so the reports are built from the journal alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fabtune.advise import fabric
from fabtune.advise.advise import predict
from fabtune.advise.job import JobSpec, fit
from fabtune.advise.measured import Measured, from_steps
from fabtune.advise.model import StepTime
from fabtune.errors import ConfigError
from fabtune.journal import Step


@dataclass(frozen=True)
class Goal:
    """What ``--model``, ``--nodes`` and ``--min-mfu`` ask of a run."""

    job: JobSpec
    nodes: int | None = None  # the target size; None: the rack's own
    min_mfu: float | None = None

    def target(self, rack_nodes: int) -> int:
        return self.nodes or rack_nodes

    def check(self, rack_nodes: int) -> None:
        """Before anything runs: the rack must measure a fabric (2+ nodes) and the job fill the target.

        Raises:
            ConfigError: naming --model and the rack's size, or the fit arithmetic (``fit``).
        """
        if rack_nodes < 2:
            why = f"a rack of {rack_nodes} node measures no fabric bandwidth: the prediction needs 2+ nodes"
            raise ConfigError(f"job {self.job.name}", [f"--model: {why}"])
        fit(self.job, self.target(rack_nodes))

    def inputs(self, rack_nodes: int) -> dict[str, Any]:
        """The journaled inputs: the job spec as validated, the target size, the threshold."""
        job = dataclasses.asdict(self.job)
        return {"job": job, "nodes": self.target(rack_nodes), "min_mfu": self.min_mfu}


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

    def shares(self) -> dict[str, float]:
        """Where the step goes, as fractions of it: compute, bubble, fabric, NVLink."""
        s = self.step
        nvlink = (s.tp_s + s.pp_s + s.ep_s + s.dp_exposed_s - s.fabric_s) / s.step_s
        return {"compute": s.compute_s / s.step_s, "bubble": s.bubble_s / s.step_s,
                "fabric": s.fabric_share, "nvlink": nvlink}

    def record(self) -> dict[str, Any]:
        """The result as journaled: every field, the verdict and the printed line."""
        return {"nodes": self.nodes, "option": self.option, "per_gpu_gbytes": self.per_gpu,
                "min_mfu": self.min_mfu, "mfu": self.step.mfu, "passed": self.passed,
                "step": dataclasses.asdict(self.step), "shares": self.shares(), "line": self.line()}

    def line(self) -> str:
        """One line: the predicted MFU and where the step goes; the threshold when one was set."""
        s, shares = self.step, self.shares()
        where = (
            f"compute {shares['compute']:.0%}, bubble {shares['bubble']:.0%}, "
            f"fabric {shares['fabric']:.0%}, NVLink {shares['nvlink']:.0%}"
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


def at_phase(goal: Goal, nodes: int, run: tuple[str, str, str | None], steps: Sequence[Step],
             phase: str) -> GateResult | None:
    """The job at ``nodes`` from the busbw a run measured in ``phase`` (``baseline``, ``final``,
    ``acceptance``); ``run`` is (id, kind, fabric type). None when the phase measured none."""
    try:
        measured = from_steps(*run, steps, phases=(phase,))
    except ConfigError:
        return None
    return gate(goal.job, measured, nodes, goal.min_mfu)
