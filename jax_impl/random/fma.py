"""Fused multiply-add on the host, exact: ``a * b + c`` rounded once, as C's ``fmaf``/``fma`` and the FMA
instructions torch's CPU kernels are compiled to (``-ffp-contract`` turns ``a * b + c`` into one).

NumPy has no FMA, and Python gains ``math.fma`` only in 3.13, so both are built from error-free
transformations, vectorised, and fall back to exact rational arithmetic on the rare elements where the
transformations cannot decide the rounding (overflow, underflow).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["fma32", "fma64"]

_F32, _F64 = np.float32, np.float64


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fmaf(a, b, c)`` elementwise (broadcasting): ``a * b + c`` rounded once to float32.

    The product of two floats is exact in double; the double sum rounds once, and rounding it again to float
    is the fused result unless the double lands exactly halfway between two floats (29 dropped bits
    ``1000...0``), where the sum's own rounding error decides the side.
    """
    a, b, c = (np.asarray(v, _F32) for v in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    a, b, c = (np.atleast_1d(v) for v in (a, b, c))  # 0-d inputs too (np.nonzero needs 1-d)
    p = a.astype(_F64) * b.astype(_F64)
    cd = np.broadcast_to(c, p.shape).astype(_F64)
    s = p + cd
    r = np.asarray(s.astype(_F32))
    halfway = (s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if np.any(halfway):
        idx = np.nonzero(halfway)
        ps, cs, ss = p[idx], cd[idx], s[idx]
        bv = ss - ps
        err = (ps - (ss - bv)) + (cs - bv)  # TwoSum: ss + err == ps + cs exactly
        rs = r[idx]
        other = np.nextafter(rs, np.where(ss > rs.astype(_F64), _F32(np.inf), _F32(-np.inf)).astype(_F32))
        beyond = (err != 0) & (np.sign(err) == np.sign(other.astype(_F64) - rs.astype(_F64)))
        r[idx] = np.where(beyond, other, rs)
    return r.reshape(shape)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: ``a == hi + lo`` with 26 significant bits each."""
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bv = s - a
    return s, (a - (s - bv)) + (b - bv)


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fma(a, b, c)`` elementwise (broadcasting): ``a * b + c`` rounded once to float64.

    ``p + e = a * b`` exactly (Dekker's product), ``s + t = p + c`` exactly (TwoSum), and the fused value
    is ``round(s + RO(t + e))`` with ``RO`` the sum rounded to odd (Boldo and Melquiond, "Emulation of FMA
    and correctly rounded sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4),
    2008): one rounding of the exact sum. ``RO(t + e)`` is the nearest sum, moved one ULP towards the exact
    value when the sum is inexact and its last significand bit is even. The elements where the splits
    could overflow or the terms underflow are computed in exact rationals.
    """
    a, b, c = (np.asarray(v, _F64) for v in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    a, b, c = (np.atleast_1d(v) for v in np.broadcast_arrays(a, b, c))  # 0-d inputs too (np.nonzero needs 1-d)
    with np.errstate(all="ignore"):
        p = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s, t = _two_sum(p, c)
        w, d = _two_sum(t, e)
        even = (w.view(np.uint64) & np.uint64(1)) == 0
        w = np.where((d != 0) & even, np.nextafter(w, np.where(d > 0, np.inf, -np.inf)), w)  # rounded to odd
        r = np.asarray(s + w)
        magnitude = np.maximum(np.abs(a), np.abs(b))
        tiny = lambda x: (x != 0) & (np.abs(x) < 2.0**-960)  # noqa: E731 - terms near the subnormal range
        unsafe = ~np.isfinite(r) | (magnitude > 2.0**995) | tiny(p) | tiny(w) | tiny(r)
    if np.any(unsafe):
        idx = np.nonzero(unsafe)
        r[idx] = [_exact(x, y, z) for x, y, z in zip(a[idx].tolist(), b[idx].tolist(), c[idx].tolist(),
                                                    strict=True)]
    return r.reshape(shape)


def _exact(a: float, b: float, c: float) -> float:
    """One element of :func:`fma64` in exact rationals (IEEE's rules for non-finite values and zero sums)."""
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # the sign of an exact zero sum, as IEEE rounds it
    try:
        return float(exact)
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")
