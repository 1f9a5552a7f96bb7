"""Seeded run-to-run noise: log-normal jitter plus occasional slow runs (cal §7).

The draw depends only on (fabric seed, run index, stream), so the same inputs and run index give
the same numbers and another run index gives other ones.
"""

from __future__ import annotations

import math

from fabtune.sim.model import params
from fabtune.sim.model.prng import Generator


def rng_for(seed: int, run_index: int, stream: int) -> Generator:
    """Return the generator of one noise stream of one run: numpy's
    ``default_rng(SeedSequence([seed, run_index, stream]))`` stream, drawn without numpy (an
    emulated tool's process does not pay numpy's import for a few draws; see ``prng``)."""
    return Generator([seed & 0xFFFFFFFF, run_index, stream])


def factor(rng: Generator, cv: float) -> float:
    """Return a multiplicative noise factor: exp(N(0, cv)), or a slow-run outlier."""
    jitter = math.exp(rng.normal(0.0, cv))
    if rng.random() < params.OUTLIER_P:
        return jitter * rng.uniform(*params.OUTLIER_RANGE)
    return jitter


def below(value: float, ceiling: float) -> float:
    """Return a noisy ``value`` that may not pass a physical ``ceiling``, reflected below it.

    A run cannot beat the link, but real runs at saturation still scatter just under it
    (ib_write_bw 391.8 / 391.8 / 391.5 Gb/s across sizes at 8 QPs, nccl#2409, cal section 7):
    clipping instead would put every upward draw exactly on the ceiling, half the runs identical.
    The excess is mirrored in log space (ceiling^2 / value), so the scatter keeps its width and
    its seed, and no run lands above the ceiling.
    """
    return value if value <= ceiling else ceiling * ceiling / value


def cv_for_size(size: int) -> float:
    """Return the busbw CV for a message size: larger for 1-64 MiB (cal §7)."""
    mid = 2**20 <= size <= 64 * 2**20
    return params.CV_BUSBW * (params.CV_MIDSIZE_MULT if mid else 1.0)
