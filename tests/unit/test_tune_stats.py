"""Decision statistics: clear wins kept early, clear losses rolled back, the false-keep rate held."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fabtune.tune.stats import DecisionPolicy, StudentT, decide, noise_floor


def sample(rng: np.random.Generator, mean: float, cv: float, n: int) -> list[float]:
    return list(mean * np.exp(rng.normal(0, cv, n)))


def sequential(
    rng: np.random.Generator, base_mean: float, cand_mean: float, cv: float, policy: DecisionPolicy
) -> tuple[str, int]:
    base = sample(rng, base_mean, cv, policy.max_runs)
    cand: list[float] = []
    while True:
        cand += sample(rng, cand_mean, cv, policy.batch if cand else policy.min_runs)
        d = decide(base, cand, policy)
        if d.verdict != "continue":
            return d.verdict, d.runs


def test_clear_win_is_kept_at_the_first_look() -> None:
    rng = np.random.default_rng(1)
    assert sequential(rng, 100, 150, 0.02, DecisionPolicy()) == ("keep", 2)


def test_clear_loss_is_rolled_back_early() -> None:
    rng = np.random.default_rng(2)
    verdict, runs = sequential(rng, 100, 60, 0.02, DecisionPolicy())
    assert verdict == "rollback" and runs <= 4


def test_gain_below_the_minimum_effect_is_not_kept() -> None:
    rng = np.random.default_rng(3)
    keeps = sum(sequential(rng, 100, 100.3, 0.01, DecisionPolicy())[0] == "keep" for _ in range(50))
    assert keeps == 0


def test_false_keep_rate_stays_below_alpha_when_nothing_changes() -> None:
    rng = np.random.default_rng(4)
    policy = DecisionPolicy(alpha=0.05, min_effect=0.0)
    trials = 300
    keeps = sum(sequential(rng, 100, 100, 0.03, policy)[0] == "keep" for _ in range(trials))
    assert keeps / trials <= 0.05


def test_gain_near_the_noise_costs_more_runs_but_is_mostly_found() -> None:
    rng = np.random.default_rng(5)
    outcomes = [sequential(rng, 100, 105, 0.03, DecisionPolicy()) for _ in range(40)]
    keeps = [runs for verdict, runs in outcomes if verdict == "keep"]
    assert len(keeps) >= 28
    assert sum(keeps) / len(keeps) > 3


def test_a_move_that_does_nothing_stops_early_for_no_gain() -> None:
    rng = np.random.default_rng(7)
    outcomes = [sequential(rng, 100, 100, 0.02, DecisionPolicy()) for _ in range(100)]
    assert all(verdict == "rollback" for verdict, _ in outcomes)
    assert sum(runs for _, runs in outcomes) / len(outcomes) < DecisionPolicy().max_runs / 2


def test_a_slow_run_in_the_baseline_does_not_earn_a_keep() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 60.0]  # one slow run (another tenant)
    d = decide(base, [100.4, 99.8, 100.1, 100.2])
    assert d.verdict != "keep" and d.outliers == 1


def test_a_slow_run_does_not_sink_a_clear_win() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    d = decide(base, [120.0, 121.0, 70.0, 119.5])
    assert d.verdict == "keep" and d.outliers == 1


def test_noise_floor_is_the_robust_cv() -> None:
    rng = np.random.default_rng(6)
    assert noise_floor(sample(rng, 100, 0.02, 400)) == pytest.approx(0.02, rel=0.15)


def test_policy_problems_name_fields() -> None:
    bad = DecisionPolicy(alpha=0.9, min_runs=0, futility=0.7, detect=0.001)
    assert [p.split(":")[0] for p in bad.problems()] == ["alpha", "min_runs", "detect", "futility"]


def test_two_runs_far_apart_wait_for_a_third() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    assert decide(base, [121.0, 70.0]).verdict == "continue"
    assert decide(base, [121.0, 70.0, 120.0]).verdict == "keep"


@pytest.mark.parametrize("dof", [1.0, 2.5, 7.3, 30.0, 412.9])
def test_student_t_is_scipy_stats_t(dof: float) -> None:
    """The decision's t distribution (scipy.special's stdtr and stdtrit) is scipy.stats.t's, value
    for value: its cdf, sf and ppf are those functions."""
    from scipy import stats

    mine, ref = StudentT(dof), stats.t(dof)
    for x in (-40.0, -3.2, -0.5, 0.0, 0.7, 2.1, 9.0):
        assert mine.cdf(x) == float(ref.cdf(x)) and mine.sf(x) == float(ref.sf(x))
    for q in (1e-6, 0.00417, 0.05, 0.5, 0.9, 0.99583, 1 - 1e-6):
        assert mine.ppf(q) == float(ref.ppf(q))


def test_the_decisions_modules_load_on_a_daemon_thread_in_a_fresh_interpreter() -> None:
    """The preload imports what the first decision needs, off the caller's thread."""
    code = (
        "import sys, threading\n"
        "from fabtune.tune import stats\n"
        "assert 'scipy.special' not in sys.modules\n"
        "t = stats.load_in_background()\n"
        "assert t.daemon and t.name == 'fabtune-preload' and t is not threading.current_thread()\n"
        "t.join(60)\n"
        "print('scipy.special' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_a_module_the_preload_cannot_import_is_left_to_the_decision() -> None:
    from fabtune.tune.stats import _import_quietly

    sys.modules.pop("tabnanny", None)
    _import_quietly(["fabtune_no_such_module_here", "tabnanny"])  # no error; the next one still loads
    assert "tabnanny" in sys.modules
