"""The model's plain-Python noise generator against numpy's ``default_rng(SeedSequence(...))``.

numpy is the reference: the model drew its noise from it before, and every seeded test rack's
numbers come from that stream. Integers and doubles must be equal bit for bit; normals must take
the same path through the ziggurat (the same draws consumed: the draw after them is equal) and
agree to 1e-13 relative (the tables are computed here in double precision, numpy's are tabulated).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabtune.sim.model import noise, params
from fabtune.sim.model.prng import Generator, seed_state

# The entropy the model passes: (seed, run index, stream), with streams past 2^32 (several words)
# and zeros (one word each).
ENTROPIES = [
    [0, 0, 0],
    [5, 0, 7_000_000],
    [19, 3, 1_000_003 * 4_000 + 7],  # the ECMP stream of flow 3999: two words
    [0xFFFFFFFF, 2**40 + 1, 12],
    [1, 2],
    [7],
    [3, 1, 4, 1, 5, 9, 2, 6],  # more words than the pool: mixed in after it
]


def reference(entropy: list[int]) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(entropy))


@pytest.mark.parametrize("entropy", ENTROPIES)
def test_seed_state_is_numpys(entropy: list[int]) -> None:
    expected = np.random.SeedSequence(entropy).generate_state(8, np.uint32)
    assert seed_state(entropy, 8) == [int(v) for v in expected]


@pytest.mark.parametrize("entropy", ENTROPIES)
def test_raw_draws_and_doubles_are_numpys_bit_for_bit(entropy: list[int]) -> None:
    mine, ref = Generator(entropy), reference(entropy)
    assert [mine.next64() for _ in range(50)] == [int(v) for v in ref.bit_generator.random_raw(50)]
    mine, ref = Generator(entropy), reference(entropy)
    assert [mine.random() for _ in range(200)] == [float(v) for v in ref.random(200)]
    assert mine.uniform(0.5, 0.9) == float(ref.uniform(0.5, 0.9))


@pytest.mark.parametrize("high", [2, 3, 7, 8, 1000, 2**31 + 11, 2**32])
def test_integers_are_numpys(high: int) -> None:
    """Lemire's draw on 32-bit halves: the half kept between calls included (calls in a row)."""
    for entropy in ENTROPIES:
        mine, ref = Generator(entropy), reference(entropy)
        assert [mine.integers(0, high) for _ in range(40)] == [int(ref.integers(0, high)) for _ in range(40)]
        assert mine.random() == float(ref.random())  # still in step after them


def test_normals_follow_numpys_path_and_value() -> None:
    """100 000 normals over 2000 streams: rejections, wedges and the tail included (about 1 in
    100 draws leaves the fast path), each stream still in step afterwards."""
    worst, draws = 0.0, 0
    for s in range(2000):
        entropy = [s * 7919, s % 13, 1_000_003 * (s + 1)]
        mine, ref = Generator(entropy), reference(entropy)
        for _ in range(50):
            a, b = mine.normal(0.0, 1.0), float(ref.normal(0.0, 1.0))
            worst = max(worst, abs(a - b) / max(abs(b), 1e-3))
            draws += 1
        assert mine.random() == float(ref.random()), f"stream {entropy} out of step"
    assert draws == 100_000 and worst < 1e-13


def test_the_tail_beyond_r_is_drawn() -> None:
    """Draws beyond the ziggurat's base (|x| > 3.654) occur and match: the tail method runs."""
    tail = 0
    for s in range(3000):
        mine, ref = Generator([s, 1, 2]), reference([s, 1, 2])
        for _ in range(20):
            a, b = mine.normal(), float(ref.normal())
            if abs(b) > 3.6541528853610088:
                tail += 1
                assert a == pytest.approx(b, rel=1e-13)
    assert tail > 0


def test_noise_factor_is_the_numpy_streams() -> None:
    """The model's noise factor, as numpy computed it before (log-normal jitter, outliers)."""
    for seed, run, stream in [(5, 0, 7_000_000), (19, 11, 3), (2, 4, 1_000_003)]:
        ref = reference([seed, run, stream])
        jitter = float(np.exp(ref.normal(0.0, params.CV_BUSBW)))
        if ref.random() < params.OUTLIER_P:
            jitter *= float(ref.uniform(*params.OUTLIER_RANGE))
        got = noise.factor(noise.rng_for(seed, run, stream), params.CV_BUSBW)
        assert math.isclose(got, jitter, rel_tol=1e-13)


def test_an_outlier_draw_is_the_numpy_streams() -> None:
    """A stream whose draw is an outlier (below OUTLIER_P) scales the jitter into OUTLIER_RANGE."""
    for stream in range(5000):
        ref = reference([5, 0, stream])
        ref.normal()
        if ref.random() < params.OUTLIER_P:
            break
    else:
        pytest.fail("no outlier in 5000 streams")
    got = noise.factor(noise.rng_for(5, 0, stream), 0.0)
    ref = reference([5, 0, stream])
    ref.normal()
    ref.random()
    assert math.isclose(got, float(ref.uniform(*params.OUTLIER_RANGE)), rel_tol=1e-15)
    assert params.OUTLIER_RANGE[0] <= got < params.OUTLIER_RANGE[1]


def test_a_range_past_32_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="not supported"):
        Generator([1]).integers(0, 2**32 + 1)
    with pytest.raises(ValueError, match="non-negative"):
        Generator([-1])
