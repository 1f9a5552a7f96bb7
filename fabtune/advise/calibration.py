"""Published MFU and fabric figures the advisor's models are checked against (docs/advisor.md,
"Calibration"). tests/unit/test_advise_calibration.py reproduces each within ``TOLERANCE``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOLERANCE = 0.15  # relative error the models must stay within, for every row


@dataclass(frozen=True)
class MfuFigure:
    """A published training run: the job (job-spec fields), its size, the per-GPU fabric bandwidth
    of its cluster (GB/s), the NVLink busbw, and the MFU it reached."""

    name: str
    job: Mapping[str, Any]
    nodes: int
    per_gpu_gbytes: float
    nvlink_gbytes: float
    mfu: float
    source: str
    note: str = ""


@dataclass(frozen=True)
class FabricFigure:
    """A published ratio of fabric options (RoCE ECMP, E-ECMP + QPs, adaptive routing)."""

    name: str
    option: str  # roce | roce+qp | roce+ar
    against: str | None  # None: the option's own efficiency beyond one leaf; else a ratio to this
    value: float
    source: str
    note: str = ""


LLAMA3_405B: dict[str, Any] = {
    "layers": 126, "hidden": 16384, "vocab": 128256, "params": 405e9, "seq_len": 8192,
    "global_batch": 2048, "tp": 8, "pp": 16, "vp": 4, "peak_tflops": 989,
}
GPT3_175B: dict[str, Any] = {
    "layers": 96, "hidden": 12288, "vocab": 51200, "seq_len": 2048, "tp": 8, "pp": 8, "peak_tflops": 312,
}

MFU_FIGURES: tuple[MfuFigure, ...] = (
    MfuFigure(
        "Llama 3 405B, 8,192 H100 (RoCE 400G), 430 TFLOP/s per GPU",
        LLAMA3_405B, 1024, 45.0, 370.0, 430 / 989,
        "https://glennklockwood.com/garden/llama-3.1 (Llama 3 paper, table 4: https://arxiv.org/abs/2407.21783)",
        "16M tokens per batch at 8K: global batch 2048; vp 4 assumed (not published)",
    ),
    MfuFigure(
        "Llama 3 405B, 16,384 H100 (RoCE 400G), 400 TFLOP/s per GPU",
        LLAMA3_405B, 2048, 45.0, 370.0, 400 / 989,
        "https://glennklockwood.com/garden/llama-3.1 (Llama 3 paper, table 4: https://arxiv.org/abs/2407.21783)",
        "as above, dp 128",
    ),
    MfuFigure(
        "Megatron-LM GPT-3 175B, 1,536 A100 (8x HDR 200G), 153 TFLOP/s (49 %) with recomputation",
        {**GPT3_175B, "global_batch": 1536}, 192, 24.0, 230.0, 0.49 * 0.75,
        "https://arxiv.org/abs/2104.04473 (Narayanan et al. 2021, table 1)",
        "hardware FLOPs include the recomputed forward (96 vs 72 B s l h^2): MFU = 3/4 of 49 %",
    ),
    MfuFigure(
        "Megatron-LM 1T, 3,072 A100 (8x HDR 200G), 163 TFLOP/s (52 %) with recomputation",
        {"layers": 128, "hidden": 25600, "vocab": 51200, "seq_len": 2048, "global_batch": 3072,
         "tp": 8, "pp": 64, "peak_tflops": 312}, 384, 24.0, 230.0, 0.52 * 0.75,
        "https://arxiv.org/abs/2104.04473 (abstract: 502 petaFLOP/s on 3072 GPUs, 52 % of peak; "
        "quoted at https://video2dn.com/video/gHaNUcS1_O4)",
        "MFU = 3/4 of the 52 % hardware FLOPs utilisation (recomputation)",
    ),
    MfuFigure(
        "Megatron-LM baseline of MegaScale, GPT-3 175B on 12,288 A100: 55.2 % / 1.34",
        {**GPT3_175B, "vocab": 64000, "global_batch": 6144}, 1536, 24.0, 230.0, 0.552 / 1.34,
        "https://yinminzhong.com/publication/megascale/ (MegaScale, NSDI'24: 55.2 % MFU, 1.34x Megatron-LM)",
        "batch 6144 and the 175B shape as recalled from the paper [R]; MegaScale's own 55.2 % overlaps "
        "TP/PP communication the model counts as exposed and is outside it",
    ),
)

FABRIC_FIGURES: tuple[FabricFigure, ...] = (
    FabricFigure(
        "untuned RoCE beyond one rack: about half of the fabric ceiling", "roce", None, 0.5,
        "https://github.com/NVIDIA/cluster-readiness-engine/pull/287",
        "OCI GB300, 4x800G RoCE, multi-rack (calibration.md section 2b)",
    ),
    FabricFigure(
        "standard Ethernet (ECMP) data throughput 60 %", "roce", None, 0.60,
        "https://storagereview.com/?p=137378", "vendor claim (calibration.md section 3)",
    ),
    FabricFigure(
        "Spectrum-X (adaptive routing) 95 %", "roce+ar", None, 0.95,
        "https://storagereview.com/?p=137378", "vendor claim (calibration.md section 3)",
    ),
    FabricFigure(
        "adaptive routing + split data on QPs: +~70 % peak busbw", "roce+ar", "roce", 1.70,
        "https://github.com/NVIDIA/cluster-readiness-engine/pull/287", "OCI GB300 (calibration.md section 4)",
    ),
    FabricFigure(
        "E-ECMP + QP scaling: up to +40 % AllReduce", "roce+qp", "roce", 1.40,
        "https://sysdesign-wiki.pages.dev/concepts/enhanced-ecmp-qp-scaling/",
        "Meta 400G RoCE (calibration.md section 4); an upper bound ('up to')",
    ),
)
ALL_SOURCES: tuple[str, ...] = tuple(
    dict.fromkeys([f.source.split()[0] for f in MFU_FIGURES] + [f.source for f in FABRIC_FIGURES])
)
