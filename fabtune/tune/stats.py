"""Keep-or-roll-back decisions with a stated false-keep rate. Pure: numbers in, verdict out.

A move is kept only when its bandwidth beats the baseline with confidence: a one-sided
Mann-Whitney U test on the repeated measurements (no normality assumed) at level ``alpha`` split
over the sequential looks (Bonferroni, so the false-keep rate over a whole sequential test stays at
or below ``alpha``), and a bootstrap confidence interval of the median ratio whose lower end clears
the minimum effect size. Clear losses and clear non-improvements stop early too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

Verdict = Literal["keep", "rollback", "continue"]


@dataclass(frozen=True)
class DecisionPolicy:
    """The parameters of a decision; each has a default and can be set in the profile."""

    alpha: float = 0.05
    min_effect: float = 0.01
    min_runs: int = 3
    max_runs: int = 12
    batch: int = 3
    bootstrap_samples: int = 2000
    confidence: float = 0.95

    @property
    def looks(self) -> int:
        """How many times the data are tested at most (one per batch after ``min_runs``)."""
        return 1 + max(0, -(-(self.max_runs - self.min_runs) // self.batch))

    def problems(self) -> list[str]:
        """Every invalid field, named with its value."""
        found = []
        if not 0 < self.alpha < 0.5:
            found.append(f"alpha: {self.alpha} must be between 0 and 0.5")
        if not 0 <= self.min_effect < 1:
            found.append(f"min_effect: {self.min_effect} must be from 0 to 1 (a fraction)")
        if not 2 <= self.min_runs <= self.max_runs:
            found.append(f"min_runs: {self.min_runs} must be from 2 to max_runs ({self.max_runs})")
        if self.batch < 1:
            found.append(f"batch: {self.batch} must be at least 1")
        return found


@dataclass(frozen=True)
class Decision:
    """The verdict and the numbers behind it."""

    verdict: Verdict
    reason: str
    runs: int
    p_gain: float
    p_loss: float
    ratio: float
    ci_low: float
    ci_high: float

    @property
    def worse(self) -> bool:
        """A significant loss (not merely no gain)."""
        return self.verdict == "rollback" and self.reason.startswith("worse")


def median_ratio_ci(
    base: Sequence[float], cand: Sequence[float], policy: DecisionPolicy, seed: int = 0
) -> tuple[float, float, float]:
    """Median(candidate)/median(baseline) and its percentile-bootstrap confidence interval."""
    rng = np.random.default_rng(seed)
    b, c = np.asarray(base, float), np.asarray(cand, float)
    bi = rng.integers(0, len(b), (policy.bootstrap_samples, len(b)))
    ci = rng.integers(0, len(c), (policy.bootstrap_samples, len(c)))
    ratios = np.median(c[ci], axis=1) / np.median(b[bi], axis=1)
    tail = (1 - policy.confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(np.median(c) / np.median(b)), float(low), float(high)


def _p(base: Sequence[float], cand: Sequence[float], alternative: Literal["greater", "less"]) -> float:
    return float(stats.mannwhitneyu(cand, base, alternative=alternative, method="auto").pvalue)


def decide(
    base: Sequence[float], cand: Sequence[float], policy: DecisionPolicy = DecisionPolicy()
) -> Decision:
    """Judge the candidate's measurements against the baseline's.

    Returns ``continue`` while neither a keep nor a rollback is clear and the run budget allows
    more measurements.
    """
    if min(len(base), len(cand)) < policy.min_runs:
        return Decision("continue", "too few runs yet", len(cand), 1.0, 1.0, 1.0, 0.0, float("inf"))
    level = policy.alpha / policy.looks
    p_gain, p_loss = _p(base, cand, "greater"), _p(base, cand, "less")
    ratio, low, high = median_ratio_ci(base, cand, policy, seed=len(cand))
    threshold = 1 + policy.min_effect

    def made(verdict: Verdict, reason: str) -> Decision:
        return Decision(verdict, reason, len(cand), p_gain, p_loss, ratio, low, high)

    if p_gain < level and low > threshold:
        return made(
            "keep", f"+{ratio - 1:.1%} (CI {low - 1:+.1%}..{high - 1:+.1%}, p={p_gain:.3g} < {level:.3g})"
        )
    if p_loss < level:
        return made("rollback", f"worse: {ratio - 1:+.1%} (p={p_loss:.3g})")
    if high < threshold:
        return made("rollback", f"no gain above {policy.min_effect:.0%}: CI {low - 1:+.1%}..{high - 1:+.1%}")
    if len(cand) >= policy.max_runs:
        return made("rollback", f"not clear after {len(cand)} runs: {ratio - 1:+.1%} (p={p_gain:.3g})")
    return made("continue", "not clear yet")


def noise_floor(samples: Sequence[float]) -> float:
    """Robust coefficient of variation of the baseline (MAD-based), the run-to-run noise."""
    values = np.asarray(samples, float)
    med = float(np.median(values))
    mad = float(np.median(np.abs(values - med)))
    return 1.4826 * mad / med if med else 0.0
