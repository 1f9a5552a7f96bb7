"""Throughput from a training job's own log: Megatron-LM, torchtitan, DeepSpeed, and plain
``step N ... time T`` lines. The median over the steps found (the first left out when there are
more than two: warm-up) becomes a measured MFU beside the prediction (docs/advisor.md, "Job log")."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fabtune.advise.job import JobSpec
from fabtune.advise.model import TERA, flops_per_token, step_flops
from fabtune.errors import ConfigError

MAX_BYTES = 64 * 1024 * 1024
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
MEGATRON = re.compile(r"iteration\s+\d+/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*" + _NUM)
TORCHTITAN = re.compile(r"step:\s*\d+\s+loss:.*?\btps:\s*" + _NUM)
DEEPSPEED = re.compile(r"(?:CurrSamplesPerSec|\b(?<!Avg)SamplesPerSec)=" + _NUM)
PLAIN = re.compile(
    r"\bstep\b[\s:=#]*\d+\b.*?\b(?:step[_ ]time|time|seconds|elapsed)\b\s*[:=]?\s*" + _NUM + r"\s*(ms|s)?\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class JobLog:
    """What a log says about throughput; exactly one of the three rates is set."""

    format: str  # megatron | torchtitan | deepspeed | plain
    steps: int
    step_s: float | None = None  # seconds per optimizer step
    tokens_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None  # global samples (sequences) per second

    def mfu(self, job: JobSpec, gpus: int) -> float:
        """The measured MFU: model FLOPs per second over GPUs x peak (the job spec's FLOP count)."""
        peak = job.peak_tflops * TERA
        if self.tokens_per_s_per_gpu is not None:
            return flops_per_token(job) * self.tokens_per_s_per_gpu / peak
        if self.samples_per_s is not None:
            return flops_per_token(job) * self.samples_per_s * job.seq_len / (gpus * peak)
        assert self.step_s is not None
        return step_flops(job) / (gpus * peak * self.step_s)


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def _positive(values: list[float]) -> list[float]:
    return [v for v in values if v > 0]


def _steady(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 2 else values)


def _megatron(text: str) -> JobLog | None:
    found = _positive([_value(m[1]) / 1000 for m in MEGATRON.finditer(text)])
    return JobLog("megatron", len(found), step_s=_steady(found)) if found else None


def _torchtitan(text: str) -> JobLog | None:
    found = _positive([_value(m[1]) for m in TORCHTITAN.finditer(text)])
    return JobLog("torchtitan", len(found), tokens_per_s_per_gpu=_steady(found)) if found else None


def _deepspeed(text: str) -> JobLog | None:
    found = _positive([_value(m[1]) for m in DEEPSPEED.finditer(text)])
    return JobLog("deepspeed", len(found), samples_per_s=_steady(found)) if found else None


def _plain(text: str) -> JobLog | None:
    scale = {"ms": 1000.0}
    found = _positive([_value(m[1]) / scale.get((m[2] or "").lower(), 1.0) for m in PLAIN.finditer(text)])
    return JobLog("plain", len(found), step_s=_steady(found)) if found else None


# the most specific format first: a Megatron or torchtitan line also matches the plain pattern
PARSERS: tuple[Callable[[str], JobLog | None], ...] = (_megatron, _torchtitan, _deepspeed, _plain)


def parse_job_log(text: str) -> JobLog | None:
    """The throughput of the first format that matches ``text``; None when none does."""
    for parse in PARSERS:
        found = parse(text)
        if found is not None:
            return found
    return None


def load_job_log(path: Path) -> JobLog:
    """Read and parse a job log; one ConfigError naming the file when it has no throughput."""
    source = f"job log {path}"
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES)
    except OSError as err:
        raise ConfigError(source, [f"cannot read: {err.strerror or err}"]) from err
    found = parse_job_log(data.decode("utf-8", errors="replace"))
    if found is None:
        raise ConfigError(
            source,
            [
                "--job-log: no step time or throughput found (Megatron-LM 'elapsed time per iteration (ms)', "
                "torchtitan 'tps:', DeepSpeed 'SamplesPerSec=', or 'step N ... time T' lines)"
            ],
        )
    return found
