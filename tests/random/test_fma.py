"""jax_impl.random.fma: one rounding of ``a * b + c``, checked against exact rational arithmetic.

(No torch here: this is the arithmetic the torch-parity draws are built on; their parity with torch is
tested in test_normal.py and tests/nn/test_init*.py.)
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from jax_impl.random.fma import fma32, fma64


def _exact64(a, b, c):
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _exact32(a, b, c):
    # Fraction -> float64 rounds once; a float32 result needs one rounding of the exact value to float32,
    # which np.float32 of a correctly rounded double does not always give: round the Fraction directly.
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    lo = np.float32(float(x))
    candidates = [lo, np.nextafter(lo, np.float32(-np.inf)), np.nextafter(lo, np.float32(np.inf))]
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - x), int(np.float32(v).view(np.uint32)) & 1))


def test_fma64_is_one_rounding_including_near_ties():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(3000) * 2.0 ** rng.integers(-30, 30, 3000)
    b = rng.standard_normal(3000)
    c = -(a * b) * (1 + rng.integers(-4, 5, 3000) * 2.0**-52)  # massive cancellation
    c[:1000] = rng.standard_normal(1000)
    ours = fma64(a, b, c)
    expected = np.array([_exact64(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())])
    np.testing.assert_array_equal(ours, expected)
    assert fma64(np.array([1.5]), 2.0, -3.0)[0] == 0.0


def test_fma32_is_one_rounding_including_halfway_doubles():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(2000).astype(np.float32)
    b = rng.standard_normal(2000).astype(np.float32)
    c = rng.standard_normal(2000).astype(np.float32)
    # Products exactly halfway between two floats (an odd 24-bit significand times 1.5 needs 25 bits) and a c
    # too small to move the double sum: the double is the halfway point, and only c's sign decides the side.
    b[:1000] = 1.5
    a[:1000] = (np.abs(a[:1000]).view(np.uint32) | 1).view(np.float32)
    c[:1000] = (np.abs(a[:1000] * np.float32(1.5)) * np.float32(2.0**-70) * np.sign(rng.standard_normal(1000))
                ).astype(np.float32)
    halfway = ((a.astype(np.float64) * b + c).view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    assert halfway.sum() > 400  # the case the double-rounding fix is for is really drawn
    ours = fma32(a, b, c)
    expected = np.array([_exact32(x, y, z) for x, y, z in zip(a, b, c)], np.float32)
    np.testing.assert_array_equal(ours, expected)


def test_fma64_decides_inexact_low_parts_without_rationals(monkeypatch):
    """Where ``t + e`` (the sum's and the product's rounding errors) is itself inexact, the rounding to odd
    decides: one rounding of the exact value, without the rational fallback (on unit-scale inputs nearly
    every element is such a case: an LBFGS update of 30k parameters took 0.6 s per call through rationals)."""
    import jax_impl.random.fma as fma_module

    calls = []
    monkeypatch.setattr(fma_module, "_exact", lambda *args: calls.append(args) or 0.0)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(4000), rng.standard_normal(4000) * 2.0 ** rng.integers(-40, 40, 4000)
    c = rng.standard_normal(4000) * 2.0 ** rng.integers(-40, 40, 4000)
    c[:1000] = -(a[:1000] * b[:1000]) * (1 + rng.integers(-4, 5, 1000) * 2.0**-52)  # massive cancellation
    # Halfway cases: a product whose low part is exactly half an ULP of s, pushed either way by a tiny c.
    a[1000:1500], b[1000:1500] = 1 + 2.0**-30, 1 + 2.0**-23
    c[1000:1500] = 2.0**-80 * np.sign(rng.standard_normal(500))
    ours = fma64(a, b, c)
    assert not calls
    expected = np.array([_exact64(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())])
    np.testing.assert_array_equal(ours, expected)


def test_zero_results_take_ieee_signs_and_scalars_broadcast():
    """A zero result's sign is IEEE's for ``a * b + c`` (``-0.0`` only from two negative zeros), with each
    operand a scalar or a vector, as LBFGS adds ``alpha * direction`` to a vector."""
    values = [0.0, -0.0, 1.5, -1.5]
    grid = np.array([(a, b, c) for a in values for b in (0.0, -0.0, 2.0, -2.0) for c in (0.0, -0.0, 3.0, -3.0)])
    a, b, c = grid.T
    expected = np.array([x * y + z for x, y, z in grid.tolist()])  # exact products and sums: one rounding
    for fma, dtype in ((fma64, np.float64), (fma32, np.float32)):
        a_, b_, c_ = (v.astype(dtype) for v in (a, b, c))
        np.testing.assert_array_equal(np.signbit(fma(a_, b_, c_)), np.signbit(expected))
        np.testing.assert_array_equal(fma(a_, b_, c_), expected.astype(dtype))
        for i in range(len(grid)):  # each operand alone as a scalar against the others' vectors
            for args in ((a_[i], b_, c_), (a_, b_[i], c_), (a_, b_, c_[i]), (a_[i], b_[i], c_[i])):
                got = fma(*args)
                want = np.broadcast_to(np.asarray(args[0], np.float64) * args[1] + args[2], got.shape)
                assert got.shape == np.broadcast_shapes(*(np.shape(v) for v in args))
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
                np.testing.assert_array_equal(got, want.astype(dtype))


def test_fma64_scalar_times_vector_is_one_rounding():
    rng = np.random.default_rng(3)
    y = rng.standard_normal(3000) * 2.0 ** rng.integers(-30, 30, 3000)
    x = -y * 0.3 * (1 + rng.integers(-4, 5, 3000) * 2.0**-52)  # cancellation against 0.3 * y
    x[:1000] = rng.standard_normal(1000)
    ours = fma64(y, 0.3, x)
    expected = np.array([_exact64(v, 0.3, w) for v, w in zip(y.tolist(), x.tolist())])
    np.testing.assert_array_equal(ours, expected)
