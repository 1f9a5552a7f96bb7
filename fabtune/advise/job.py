"""The job spec: a small YAML mapping of the model, the batch, the parallel degrees and the GPU.

Every value is checked; every problem is reported at once as one ConfigError naming the field and
the value. ``fit`` refuses a job whose parallel degrees cannot fill N nodes, with the arithmetic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.errors import ConfigError
from fabtune.profile import read_yaml

MAX_BYTES = 64 * 1024
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
# Bytes of one activation element on the wire (TP, PP, EP traffic): fp8 training keeps bf16
# activations between layers (Transformer Engine casts inside the GEMMs).
ACT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}
# Bytes of one gradient element in the data-parallel reduction: Megatron-LM accumulates and
# all-reduces bf16 gradients in fp32 by default ("accumulate and all-reduce gradients in fp32 for
# bfloat16 data type", its start-up log: NVIDIA/Megatron-LM#756); fp16 reduces in fp16.
GRAD_BYTES = {"bf16": 4, "fp16": 2, "fp8": 4, "fp32": 4}
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^\s*(?P<n>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<s>[kKmMbBgGtT]?)\s*$")

# field -> (kind, default); kind: "int", "num", "frac" (0 < x <= 1), "prec". A default of None is
# optional; REQUIRED must be given.
REQUIRED = object()
FIELDS: dict[str, tuple[str, Any]] = {
    "name": ("str", "job"),
    "params": ("num", None),
    "active_params": ("num", None),
    "layers": ("int", None),
    "hidden": ("int", None),
    "vocab": ("int", 0),
    "seq_len": ("int", REQUIRED),
    "global_batch": ("int", REQUIRED),
    "micro_batch": ("int", 1),
    "precision": ("prec", "bf16"),
    "dp": ("int", None),
    "tp": ("int", 1),
    "pp": ("int", 1),
    "vp": ("int", 1),
    "ep": ("int", 1),
    "moe_layers": ("int", None),
    "top_k": ("int", None),
    "gpus_per_node": ("int", 8),
    "peak_tflops": ("num", REQUIRED),
    "achievable": ("frac", 0.5),  # docs/advisor.md: fit to the calibration table
    "overlap": ("frac0", 1.0),
    "nvlink_busbw": ("num", 370.0),
}


@dataclass(frozen=True)
class JobSpec:
    """A validated job. Sizes in sequences and elements; FLOP/s and GB/s as given."""

    name: str
    params: float  # total parameters (given, or 12 L h^2 + V h)
    active_params: float  # parameters a token passes through (MoE); = params for a dense model
    layers: int | None
    hidden: int | None
    vocab: int
    seq_len: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int
    precision: str
    dp: int | None  # None: whatever fills the cluster
    tp: int
    pp: int
    vp: int  # interleaved pipeline chunks per stage
    ep: int
    moe_layers: int
    top_k: int
    gpus_per_node: int
    peak_tflops: float  # per GPU, dense, at ``precision``
    achievable: float  # fraction of peak the compute kernels reach (docs/advisor.md)
    overlap: float  # fraction of the last micro-batch's backward that can hide the DP reduction
    nvlink_busbw: float  # GB/s, intra-node collective bus bandwidth

    @property
    def model_gpus(self) -> int:
        """GPUs of one model replica: tp x pp."""
        return self.tp * self.pp


@dataclass(frozen=True)
class Layout:
    """The job on ``nodes`` nodes: every degree known."""

    nodes: int
    gpus: int
    dp: int
    microbatches: int  # per pipeline per step: global_batch / (dp x micro_batch)


def number(value: Any) -> float | None:
    """A positive-or-zero count from YAML: 70e9, 7.0e+10, '70B', '1.5T' (None when not one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if m:
            return float(m["n"]) * _SUFFIX[m["s"].lower()]
    return None


def _shown(value: Any) -> str:
    return repr(value) if not isinstance(value, str) or len(value) < 40 else repr(value[:40] + "...")


def _check_str(value: Any) -> tuple[Any, str]:
    ok = isinstance(value, str) and 0 < len(value) <= 64
    return (value if ok else None), "is not a name (1-64 characters)"


def _check_prec(value: Any) -> tuple[Any, str]:
    return (value if value in PRECISIONS else None), f"is not one of {', '.join(PRECISIONS)}"


def _check_int(value: Any) -> tuple[Any, str]:
    n = number(value)
    whole = n is not None and n >= 1 and n == int(n)
    return (int(n) if whole and n is not None else None), "is not a whole number >= 1"


def _check_frac(value: Any) -> tuple[Any, str]:
    n = number(value)
    return (n if n is not None and 0 < n <= 1 else None), "is not a fraction in (0, 1]"


def _check_frac0(value: Any) -> tuple[Any, str]:
    n = number(value)
    return (n if n is not None and 0 <= n <= 1 else None), "is not a fraction in [0, 1]"


def _check_num(value: Any) -> tuple[Any, str]:
    n = number(value)
    return (n if n is not None and n > 0 else None), "is not a positive number"


_CHECKS = {
    "str": _check_str,
    "prec": _check_prec,
    "int": _check_int,
    "frac": _check_frac,
    "frac0": _check_frac0,
    "num": _check_num,
}


def _field(key: str, kind: str, value: Any) -> tuple[Any, str | None]:
    """The checked value of one field, or the problem naming it and its value."""
    checked, why = _CHECKS[kind](value)
    return (checked, None) if checked is not None else (None, f"{key}: {_shown(value)} {why}")


def _nearest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, FIELDS, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_job(doc: Any, source: str) -> JobSpec:
    """Check a parsed job spec; every problem at once in one ConfigError."""
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(doc).__name__}, not a mapping"
        raise ConfigError(source, [f"(top level): {what}; a job spec is a mapping of {', '.join(FIELDS)}"])
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key in doc:
        if key not in FIELDS:
            name = key if isinstance(key, str) and len(key) < 40 else "(a key)"
            problems.append(f"{name}: is not a job field{_nearest(str(key))}")
    for key, (kind, default) in FIELDS.items():
        if key not in doc or doc[key] is None:
            if default is REQUIRED:
                problems.append(f"{key}: missing (required)")
            values[key] = None if default is REQUIRED else default
            continue
        values[key], problem = _field(key, kind, doc[key])
        if problem:
            problems.append(problem)
    problems += _relations(values)
    if problems:
        raise ConfigError(source, problems)
    return _spec(values)


def _relations(v: Mapping[str, Any]) -> list[str]:
    """Problems between fields (only where each field on its own is valid)."""
    problems = []
    if v["params"] is None and (v["layers"] is None or v["hidden"] is None):
        problems.append("params: missing; give params, or layers and hidden (and vocab)")
    needs_shape = [k for k in ("tp", "pp", "ep") if isinstance(v[k], int) and v[k] > 1]
    for k in needs_shape:
        for shape in ("layers", "hidden"):
            if v[shape] is None:
                problems.append(f"{shape}: missing; {k} {v[k]} > 1 needs it (activation sizes)")
    if isinstance(v["ep"], int) and v["ep"] > 1 and v["top_k"] is None:
        problems.append(f"top_k: missing; ep {v['ep']} > 1 is a mixture of experts: give experts per token")
    params, active = v["params"], v["active_params"]
    if isinstance(params, float) and isinstance(active, float) and active > params:
        problems.append(f"active_params: {active:g} is more than params {params:g}")
    layers, moe = v["layers"], v["moe_layers"]
    if isinstance(layers, int) and isinstance(moe, int) and moe > layers:
        problems.append(f"moe_layers: {moe} is more than layers {layers}")
    pp, vp = v["pp"], v["vp"]
    if isinstance(vp, int) and vp > 1 and pp == 1:
        problems.append(f"vp: {vp} needs pp > 1 (interleaved pipeline chunks)")
    tp, gpn = v["tp"], v["gpus_per_node"]
    if isinstance(tp, int) and isinstance(gpn, int) and (tp > gpn or gpn % tp):
        problems.append(
            f"tp: {tp} does not divide gpus_per_node {gpn}; tensor parallelism is modelled inside a node"
        )
    gb, mb = v["global_batch"], v["micro_batch"]
    if isinstance(gb, int) and isinstance(mb, int) and gb % mb:
        problems.append(f"global_batch: {gb} is not a multiple of micro_batch {mb}")
    return problems


def _spec(v: Mapping[str, Any]) -> JobSpec:
    layers, hidden, vocab = v["layers"], v["hidden"], v["vocab"]
    params = v["params"] if v["params"] is not None else 12.0 * layers * hidden**2 + vocab * hidden
    return JobSpec(
        name=v["name"],
        params=params,
        active_params=v["active_params"] if v["active_params"] is not None else params,
        layers=layers,
        hidden=hidden,
        vocab=vocab,
        seq_len=v["seq_len"],
        global_batch=v["global_batch"],
        micro_batch=v["micro_batch"],
        precision=v["precision"],
        dp=v["dp"],
        tp=v["tp"],
        pp=v["pp"],
        vp=v["vp"],
        ep=v["ep"],
        moe_layers=v["moe_layers"] if v["moe_layers"] is not None else (layers or 0) if v["ep"] > 1 else 0,
        top_k=v["top_k"] or 0,
        gpus_per_node=v["gpus_per_node"],
        peak_tflops=v["peak_tflops"],
        achievable=v["achievable"],
        overlap=v["overlap"],
        nvlink_busbw=v["nvlink_busbw"],
    )


def load_job(path: Path) -> JobSpec:
    """Read and check a job spec file (YAML, at most 64 KiB)."""
    source = f"job spec {path}"
    doc = read_yaml(path, source, "a job spec", MAX_BYTES)
    return parse_job(doc, source)


def fit_problem(job: JobSpec, nodes: int) -> str | None:
    """Why ``job`` cannot run on ``nodes`` nodes, with the arithmetic; None when it fits."""
    gpn = job.gpus_per_node
    gpus = nodes * gpn
    at = f"N={nodes}: {nodes} nodes x {gpn} GPUs = {gpus} GPUs"
    if nodes < 1:
        return f"N={nodes}: a cluster has at least 1 node"
    if gpus % job.model_gpus:
        return f"{at} is not a multiple of tp {job.tp} x pp {job.pp} = {job.model_gpus} GPUs (a replica)"
    dp = gpus // job.model_gpus
    if job.dp is not None and dp != job.dp:
        need = job.dp * job.model_gpus
        return (
            f"{at}, but dp {job.dp} x tp {job.tp} x pp {job.pp} = {need} GPUs "
            f"({need / gpn:g} nodes); leave dp out to fill any N"
        )
    if job.global_batch % (dp * job.micro_batch):
        return (
            f"{at} gives dp {dp}; global_batch {job.global_batch} is not a multiple of "
            f"dp {dp} x micro_batch {job.micro_batch} = {dp * job.micro_batch}"
        )
    if dp % job.ep:
        return f"{at} gives dp {dp}; ep {job.ep} does not divide it (experts shard over data-parallel ranks)"
    return None


def fit(job: JobSpec, nodes: int) -> Layout:
    """``job`` laid out on ``nodes`` nodes; ConfigError with the arithmetic when it cannot be."""
    problem = fit_problem(job, nodes)
    if problem:
        raise ConfigError(f"job {job.name} on the cluster", [problem])
    gpus = nodes * job.gpus_per_node
    dp = gpus // job.model_gpus
    return Layout(nodes, gpus, dp, job.global_batch // (dp * job.micro_batch))
