"""The model's noise generator in plain Python: numpy's ``default_rng(SeedSequence(entropy))``
stream, without importing numpy.

Every emulated nccl-tests launch and ib_write_bw run draws a few noise numbers, and importing numpy
for them cost each such process about 0.12-0.18 s of its 0.3-0.4 s (measured on a testbed host,
``-X importtime`` and cProfile of an emulated rank 0): a third of a launch's time on the testbed.
This module draws the same stream from the published algorithms:

- ``SeedSequence``: entropy words hashed into a 4-word pool and expanded (M. E. O'Neill's
  seed_seq design, as numpy documents it: ``numpy.random.SeedSequence``);
- ``PCG64``: a 128-bit LCG with the XSL-RR output (O'Neill, "PCG: A Family of Simple Fast
  Space-Efficient Statistically Good Algorithms for Random Number Generation", 2014), seeded
  from four 64-bit state words;
- ``random``: the top 53 bits of a 64-bit draw; ``uniform``: ``low + (high - low) * random()``;
- ``normal``: the ziggurat of Marsaglia and Tsang ("The Ziggurat Method for Generating Random
  Variables", 2000) with 256 layers and 52-bit draws, its tables computed here from the layer
  count's tail start and strip area;
- ``integers``: Lemire's nearly divisionless bounded draw ("Fast Random Integer Generation in an
  Interval", 2019) on 32-bit halves of the 64-bit draws.

``tests/unit/test_model_prng.py`` holds every draw against numpy's: PCG64's integers and doubles
equal bit for bit; the normals take the same path (the same draws consumed, so the stream stays
in step) and agree to about 1e-14 relative: this module's ziggurat tables are computed in double
precision, numpy's were tabulated once, and the two differ in their last bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_M32 = 0xFFFF_FFFF
_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1

# SeedSequence's hash and mix constants (O'Neill's seed_seq_fe, as numpy documents and uses them)
_POOL = 4
_INIT_A, _MULT_A = 0x43B0_D7E5, 0x931E_8875
_INIT_B, _MULT_B = 0x8B51_F9DD, 0x58F3_8DED
_MIX_L, _MIX_R = 0xCA01_F9DD, 0x4973_F715
_XSHIFT = 16

# PCG's default 128-bit LCG multiplier (O'Neill's pcg_variants.h: PCG_DEFAULT_MULTIPLIER_128)
_PCG_MULT = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645

# The normal ziggurat: 256 layers; the base layer's tail starts at R; each layer has area V
_ZIG_R = 3.6541528853610087963519472518
_ZIG_INV_R = 0.27366123732975827203338247596  # 1 / R
_ZIG_V = 0.004928673233974655  # R f(R) + sqrt(pi/2) erfc(R / sqrt 2), f(x) = exp(-x^2 / 2)
_MANTISSA = float(1 << 52)


def _words(entropy: Sequence[int]) -> list[int]:
    """Each entropy value as 32-bit words, least significant first (0 is one word)."""
    out: list[int] = []
    for value in entropy:
        if value < 0:
            raise ValueError(f"entropy must be non-negative: {value}")
        out.append(value & _M32)
        value >>= 32
        while value:
            out.append(value & _M32)
            value >>= 32
    return out


class _Hash:
    """SeedSequence's multiplicative hash, whose constant moves on with every word."""

    def __init__(self, init: int, mult: int) -> None:
        self.const, self.mult = init, mult

    def __call__(self, value: int) -> int:
        value = (value ^ self.const) & _M32
        self.const = (self.const * self.mult) & _M32
        value = (value * self.const) & _M32
        return value ^ (value >> _XSHIFT)


def _mix(x: int, y: int) -> int:
    r = ((_MIX_L * x) & _M32) - ((_MIX_R * y) & _M32)
    r &= _M32
    return r ^ (r >> _XSHIFT)


def _pool(entropy: Sequence[int]) -> list[int]:
    """SeedSequence's pool: the entropy words hashed in, then every word mixed into every other."""
    words = _words(entropy)
    hashmix = _Hash(_INIT_A, _MULT_A)
    pool = [hashmix(words[i] if i < len(words) else 0) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = _mix(pool[dst], hashmix(pool[src]))
    for word in words[_POOL:]:
        for dst in range(_POOL):
            pool[dst] = _mix(pool[dst], hashmix(word))
    return pool


def seed_state(entropy: Sequence[int], n_words: int) -> list[int]:
    """SeedSequence(entropy).generate_state(n_words) as 32-bit words."""
    pool = _pool(entropy)
    hashmix = _Hash(_INIT_B, _MULT_B)
    return [hashmix(pool[i % _POOL]) for i in range(n_words)]


def _ziggurat() -> tuple[list[int], list[float], list[float]]:
    """The normal ziggurat's tables: per layer, the accept threshold (52-bit), the scale of a draw
    and the density at the layer's edge. Layer 0 is the base with the tail; x grows with the
    layer (layer 255's edge is R)."""
    ki, wi, fi = [0] * 256, [0.0] * 256, [0.0] * 256
    x1 = _ZIG_R
    wi[255] = x1 / _MANTISSA
    fi[255] = math.exp(-0.5 * x1 * x1)
    ki[0] = int(x1 * fi[255] / _ZIG_V * _MANTISSA)
    wi[0] = _ZIG_V / fi[255] / _MANTISSA
    fi[0] = 1.0
    for i in range(254, 0, -1):
        x = math.sqrt(-2.0 * math.log(_ZIG_V / x1 + fi[i + 1]))
        ki[i + 1] = int(x / x1 * _MANTISSA)
        wi[i] = x / _MANTISSA
        fi[i] = math.exp(-0.5 * x * x)
        x1 = x
    ki[1] = 0
    return ki, wi, fi


_KI, _WI, _FI = _ziggurat()


class Generator:
    """numpy's ``default_rng(SeedSequence(entropy))``: PCG64 and the draws the model makes."""

    def __init__(self, entropy: Sequence[int]) -> None:
        w = seed_state(entropy, 8)
        s0, s1, s2, s3 = (w[2 * i] | (w[2 * i + 1] << 32) for i in range(4))
        self._inc = (((s2 << 64) | s3) << 1 | 1) & _M128
        self._state = 0
        self._step()
        self._state = (self._state + ((s0 << 64) | s1)) & _M128
        self._step()
        self._half: int | None = None  # the upper half of a 64-bit draw, kept for the next 32 bits

    def _step(self) -> None:
        self._state = (self._state * _PCG_MULT + self._inc) & _M128

    def next64(self) -> int:
        """The next 64-bit output: the LCG steps, then XSL-RR of the new state."""
        self._step()
        state = self._state
        x = (state >> 64) ^ (state & _M64)
        rot = state >> 122
        return ((x >> rot) | (x << ((64 - rot) & 63))) & _M64

    def next32(self) -> int:
        """32 bits: the low half of a 64-bit draw, then its high half."""
        if self._half is not None:
            half, self._half = self._half, None
            return half
        value = self.next64()
        self._half = value >> 32
        return value & _M32

    def random(self) -> float:
        """A double in [0, 1): the top 53 bits of a 64-bit draw."""
        return (self.next64() >> 11) * (1.0 / 9007199254740992.0)

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def integers(self, low: int, high: int) -> int:
        """An integer in [low, high) for a range under 2^32 (Lemire's bounded draw)."""
        span = high - low - 1
        if span < 0 or span > _M32:
            raise ValueError(f"integers: range [{low}, {high}) not supported")
        if span == 0:
            return low
        if span == _M32:
            return low + self.next32()
        bound = span + 1
        m = self.next32() * bound
        if (m & _M32) < bound:
            threshold = (_M32 - span) % bound
            while (m & _M32) < threshold:
                m = self.next32() * bound
        return low + (m >> 32)

    def normal(self, loc: float = 0.0, scale: float = 1.0) -> float:
        return loc + scale * self._standard_normal()

    def _standard_normal(self) -> float:
        while True:
            r = self.next64()
            idx = r & 0xFF
            r >>= 8
            negative = r & 1
            rabs = (r >> 1) & 0x000F_FFFF_FFFF_FFFF
            x = rabs * _WI[idx]
            if negative:
                x = -x
            if rabs < _KI[idx]:
                return x
            if idx == 0:
                return self._tail(rabs)
            if (_FI[idx - 1] - _FI[idx]) * self.random() + _FI[idx] < math.exp(-0.5 * x * x):
                return x

    def _tail(self, rabs: int) -> float:
        """A draw beyond R (Marsaglia's tail method; 1 - U keeps the logarithm finite)."""
        while True:
            xx = -_ZIG_INV_R * math.log1p(-self.random())
            yy = -math.log1p(-self.random())
            if yy + yy > xx * xx:
                return -(_ZIG_R + xx) if (rabs >> 8) & 1 else _ZIG_R + xx
