"""Keep-or-roll-back decisions with a stated false-keep rate. Pure: numbers in, verdict out.

The measurements are compared on a log scale (bandwidth effects multiply), after slow-run
outliers are set aside (a run further than ``outlier_k`` robust deviations below or above its own
group's median; the robust deviation is the baseline's noise floor). On what is left, a pooled
t-test of the mean log ratio gives one-sided confidence bounds:

* **keep** when the lower bound clears ``1 + min_effect`` at level ``alpha / looks`` (Bonferroni
  over the sequential looks, so the chance of keeping a move whose true gain is below the minimum
  effect stays at or below ``alpha`` over a whole sequential test);
* **worse** (roll back) when the upper bound at the same level is below 1;
* **no gain** (roll back, futility) when an upper bound at level ``futility`` is below
  ``1 + detect``, the smallest gain the loop is built not to miss (gains between ``min_effect``
  and ``detect`` may go either way). Stopping for futility can only lower the false-keep rate,
  and it saves the runs a move that does nothing would otherwise take;
* **not clear** (roll back) at ``max_runs``.

The false-keep and wrong-rollback rates this gives are measured in ``bench/decisions.py``.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fabtune.errors import BenchmarkError

Verdict = Literal["keep", "rollback", "continue"]
MIN_NOISE = 0.01  # a floor on the deviation used to set outliers aside (1 %): a MAD of a few runs can be tiny
CEILING_MARGIN = 1.05  # a sample above its physical ceiling by more than this factor cannot be real


class ImpossibleSample(BenchmarkError):
    """A measurement no working benchmark can report (zero, negative, not a number, above the ceiling)."""


def impossible(value: float, ceiling: float | None = None) -> str | None:
    """Why ``value`` (a bus bandwidth, GB/s) cannot be a measurement; None when it can."""
    if not math.isfinite(value):
        return f"{value} GB/s is not a finite number"
    if value <= 0:
        return f"{value} GB/s is not positive"
    if ceiling is not None and value > CEILING_MARGIN * ceiling:
        return (
            f"{value:.2f} GB/s is above the NICs' ceiling of {ceiling:.2f} GB/s "
            f"(refused beyond x{CEILING_MARGIN})"
        )
    return None


def refuse_impossible(samples: Sequence[float], what: str, ceiling: float | None = None) -> None:
    """Raise unless every sample is a possible measurement.

    Raises:
        ImpossibleSample: naming the sample, its value and why.
    """
    for index, value in enumerate(samples):
        problem = impossible(float(value), ceiling)
        if problem:
            raise ImpossibleSample(f"{what} sample {index + 1} of {len(samples)} refused: {problem}")


@dataclass(frozen=True)
class DecisionPolicy:
    """The parameters of a decision; each has a default and can be set in the profile."""

    alpha: float = 0.05
    min_effect: float = 0.01
    min_runs: int = 2
    max_runs: int = 12
    batch: int = 2
    futility: float = 0.1
    detect: float = 0.03
    outlier_k: float = 5.0

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
        if not 1 <= self.min_runs <= self.max_runs:
            found.append(f"min_runs: {self.min_runs} must be from 1 to max_runs ({self.max_runs})")
        if self.batch < 1:
            found.append(f"batch: {self.batch} must be at least 1")
        if not self.min_effect <= self.detect < 1:
            found.append(f"detect: {self.detect} must be from min_effect ({self.min_effect}) to 1")
        if not 0 <= self.futility < 0.5:
            found.append(f"futility: {self.futility} must be from 0 (never stop early for no gain) to 0.5")
        if self.outlier_k < 3:
            found.append(f"outlier_k: {self.outlier_k} must be at least 3 (robust deviations)")
        return found


@dataclass(frozen=True)
class Decision:
    """The verdict and the numbers behind it (bounds at the sequential level ``alpha / looks``)."""

    verdict: Verdict
    reason: str
    runs: int
    p_gain: float
    p_loss: float
    ratio: float
    ci_low: float
    ci_high: float
    outliers: int = 0
    p: float = 1.0  # the p-value the reason cites (gain, loss or futility: whichever decided)

    @property
    def worse(self) -> bool:
        """A significant loss (not merely no gain)."""
        return self.verdict == "rollback" and self.reason.startswith("worse")


def noise_floor(samples: Sequence[float]) -> float:
    """Robust coefficient of variation of the baseline (MAD-based), the run-to-run noise."""
    values = np.asarray(samples, float)
    med = float(np.median(values))
    mad = float(np.median(np.abs(values - med)))
    return 1.4826 * mad / med if med else 0.0


def _inliers(logs: np.ndarray, scale: float, k: float) -> np.ndarray:
    if len(logs) < 3:  # too few to tell the odd one out
        return logs
    kept: np.ndarray = logs[np.abs(logs - np.median(logs)) <= k * scale]
    return kept


def _split(logs: np.ndarray, scale: float, k: float) -> bool:
    """Two runs too far apart to tell which one is the slow one: wait for a third."""
    return len(logs) == 2 and float(np.ptp(logs)) > k * scale


@dataclass(frozen=True)
class _Estimate:
    diff: float  # mean log ratio
    se: float
    dof: int
    outliers: int


def _estimate(base: Sequence[float], cand: Sequence[float], policy: DecisionPolicy) -> _Estimate | None:
    b_all, c_all = np.log(np.asarray(base, float)), np.log(np.asarray(cand, float))
    scale = max(noise_floor(base), MIN_NOISE)
    b, c = _inliers(b_all, scale, policy.outlier_k), _inliers(c_all, scale, policy.outlier_k)
    dof = len(b) + len(c) - 2
    if len(b) < 2 or len(c) < 1 or dof < 1 or _split(c, scale, policy.outlier_k):
        return None
    pooled = (float(np.sum((b - b.mean()) ** 2)) + float(np.sum((c - c.mean()) ** 2))) / dof
    se = math.sqrt(max(pooled, 1e-8) * (1 / len(b) + 1 / len(c)))
    outliers = len(b_all) - len(b) + len(c_all) - len(c)
    return _Estimate(float(c.mean() - b.mean()), se, dof, outliers)


DECISION_MODULES = ("scipy.special",)
"""What the first decision imports (``StudentT``), half a second here."""


def load_in_background() -> threading.Thread:
    """Import ``DECISION_MODULES`` on a daemon thread, so that the first decision, which follows
    the baseline's benchmarks, does not wait for them: a caller starts it before it waits on the
    benchmarks. A module that cannot be imported is left to the decision's own import to raise."""
    thread = threading.Thread(target=_import_quietly, args=(DECISION_MODULES,), name="fabtune-preload",
                              daemon=True)
    thread.start()
    return thread


def _import_quietly(names: Sequence[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


@dataclass(frozen=True)
class StudentT:
    """Student's t distribution with ``dof`` degrees of freedom: the functions ``scipy.stats.t``
    computes with (its ``_cdf``, ``_sf`` and ``_ppf``: ``scipy.special.stdtr`` and ``stdtrit``),
    taken from ``scipy.special``, which loads in about a third of the time of ``scipy.stats``
    (0.5 s against 1.5 s here, on the first decision of every tuning run)."""

    dof: float

    def cdf(self, x: float) -> float:
        from scipy import special  # here, not at the top: it is half a second of every CLI command's start

        return float(special.stdtr(self.dof, x))

    def sf(self, x: float) -> float:
        return self.cdf(-x)

    def ppf(self, q: float) -> float:
        from scipy import special

        return float(special.stdtrit(self.dof, q))


def decide(
    base: Sequence[float], cand: Sequence[float], policy: DecisionPolicy = DecisionPolicy()
) -> Decision:
    """Judge the candidate's measurements against the baseline's.

    Returns ``continue`` while neither a keep nor a rollback is clear and the run budget allows
    more measurements.

    Raises:
        ImpossibleSample: a sample that cannot be a measurement (zero, negative, not finite).
    """
    refuse_impossible(base, "reference")
    refuse_impossible(cand, "candidate")
    est = _estimate(base, cand, policy) if len(cand) >= policy.min_runs else None
    if est is None:
        why = "too few runs yet" if len(cand) < policy.min_runs else "runs too far apart to judge yet"
        return Decision("continue", why, len(cand), 1.0, 1.0, 1.0, 0.0, float("inf"))
    level = policy.alpha / policy.looks
    goal = math.log1p(policy.min_effect)
    t = StudentT(est.dof)
    p_gain = t.sf((est.diff - goal) / est.se)
    p_loss = t.cdf(est.diff / est.se)
    p_futile = t.cdf((est.diff - math.log1p(policy.detect)) / est.se)
    half = t.ppf(1 - level) * est.se
    ratio, low, high = math.exp(est.diff), math.exp(est.diff - half), math.exp(est.diff + half)

    def made(verdict: Verdict, reason: str, p: float = p_gain) -> Decision:
        return Decision(verdict, reason, len(cand), p_gain, p_loss, ratio, low, high, est.outliers, p)

    bounds = f"bounds {low - 1:+.1%}..{high - 1:+.1%}"
    if p_gain < level:
        return made("keep", f"+{ratio - 1:.1%} ({bounds}, p={p_gain:.3g} < {level:.3g})")
    if p_loss < level:
        return made("rollback", f"worse: {ratio - 1:+.1%} (p={p_loss:.3g})", p_loss)
    if p_futile < policy.futility:
        futile = f"no gain of {policy.detect:.0%}: {ratio - 1:+.1%} (p={p_futile:.3g})"
        return made("rollback", futile, p_futile)
    if len(cand) >= policy.max_runs:
        return made("rollback", f"not clear after {len(cand)} runs: {ratio - 1:+.1%} (p={p_gain:.3g})")
    return made("continue", "not clear yet")
