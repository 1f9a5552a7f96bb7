"""Seeded run-to-run noise: log-normal jitter plus occasional slow runs (cal §7).

The draw depends only on (fabric seed, run index, stream), so the same inputs and run index give
the same numbers and another run index gives other ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabtune.sim.model import params

if TYPE_CHECKING:  # numpy is imported where a draw is made: an emulated tool that only reads the
    import numpy as np  # configuration types (a nccl-tests rank other than 0) does not load it


def rng_for(seed: int, run_index: int, stream: int) -> np.random.Generator:
    """Return the generator of one noise stream of one run."""
    import numpy as np

    return np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, run_index, stream]))


def factor(rng: np.random.Generator, cv: float) -> float:
    """Return a multiplicative noise factor: exp(N(0, cv)), or a slow-run outlier."""
    import numpy as np

    jitter = float(np.exp(rng.normal(0.0, cv)))
    if rng.random() < params.OUTLIER_P:
        return jitter * float(rng.uniform(*params.OUTLIER_RANGE))
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
