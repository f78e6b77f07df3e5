"""ULP distances on hand-constructed cases of known distance, and drawn ones."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.ulp import ordered_bits, ulp_distance

INT = {np.float16: np.int16, np.float32: np.int32, np.float64: np.int64}


def from_ordered(ordered: int, dtype) -> np.ndarray:
    """Inverse of ordered_bits for one value: the float whose ordered integer is ``ordered``."""
    itype = INT[dtype]
    sign_bit = int(np.iinfo(itype).min)
    bits = ordered if ordered >= 0 else sign_bit - ordered
    return np.array([bits], dtype=itype).view(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_one_ulp_above_one(dtype):
    one = dtype(1.0)
    nxt = np.nextafter(one, dtype(2.0))
    assert ulp_distance(np.array([one]), np.array([nxt]))[0] == 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_across_zero(dtype):
    tiny = np.nextafter(dtype(0.0), dtype(1.0))  # smallest positive subnormal
    pairs = {
        (dtype(0.0), dtype(-0.0)): 0,
        (tiny, dtype(0.0)): 1,
        (-tiny, dtype(0.0)): 1,
        (-tiny, dtype(-0.0)): 1,
        (tiny, -tiny): 2,
        (np.nextafter(tiny, dtype(1)), -tiny): 3,
    }
    for (a, b), expected in pairs.items():
        assert ulp_distance(np.array([a]), np.array([b]))[0] == expected, (a, b)
        assert ulp_distance(np.array([b]), np.array([a]))[0] == expected, (b, a)


def test_plus_minus_one_float32():
    # Ordered integers: 1.0 -> 0x3F800000, -1.0 -> -0x3F800000.
    assert ulp_distance(np.float32([1.0]), np.float32([-1.0]))[0] == 2 * 0x3F800000


def test_float64_extremes_do_not_overflow():
    big = np.finfo(np.float64).max
    d = ulp_distance(np.array([big]), np.array([-big]))[0]
    assert d == 2 * 0x7FEFFFFFFFFFFFFF  # > 2**63: needs uint64
    assert ulp_distance(np.array([np.inf]), np.array([big]))[0] == 1


def test_ordering_is_monotonic():
    x = np.sort(np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e-38)
    assert np.all(np.diff(ordered_bits(x)) >= 0)


@settings(max_examples=300, deadline=None)
@given(
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    start_frac=st.floats(-1.0, 1.0),
    k_frac=st.floats(0.0, 1.0),
)
def test_drawn_distance(dtype, start_frac, k_frac):
    # Any two finite floats whose ordered integers differ by k are k ULPs apart.
    top = int(ordered_bits(np.array([np.finfo(dtype).max], dtype=dtype))[0])
    k = int(k_frac * min(2**20, top))
    start = max(-top, min(top - k, int(start_frac * (top - k))))  # float rounding may overshoot
    a = from_ordered(start, dtype)
    b = from_ordered(start + k, dtype)
    assert np.isfinite(a).all() and np.isfinite(b).all()
    assert ulp_distance(a, b)[0] == k
    assert ulp_distance(b, a)[0] == k
