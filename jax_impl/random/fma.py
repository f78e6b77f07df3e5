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
    # Few passes, in place: LBFGS adds each of its directions with this, on every iteration.
    with np.errstate(all="ignore"):  # infinities and NaNs as fmaf gives them, silently
        s = np.multiply(a, b, dtype=_F64)  # exact
        s = np.add(s, c, out=s if s.shape == np.broadcast_shapes(s.shape, c.shape) else None)
        r = np.asarray(s.astype(_F32))
    low = np.bitwise_and(s.view(np.uint64), np.uint64(0x1FFFFFFF), out=s.view(np.uint64))  # s is spent
    halfway = low == np.uint64(0x10000000)
    if halfway.any():
        idx = np.nonzero(halfway)
        ps = np.broadcast_to(a, s.shape)[idx].astype(_F64) * np.broadcast_to(b, s.shape)[idx].astype(_F64)
        cs = np.broadcast_to(c, s.shape)[idx].astype(_F64)
        ss = ps + cs
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
    value when the sum is inexact and its last significand bit is even. A zero result takes IEEE's sign
    rule from ``a * b + c`` (the pairs' zeros have lost it). The elements where the splits could overflow
    or the terms underflow are computed in exact rationals.
    """
    a, b, c = (np.asarray(v, _F64) for v in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    a, b, c = (np.atleast_1d(v) for v in (a, b, c))  # 0-d inputs too (np.nonzero needs 1-d)
    # In place, and a scalar operand never broadcast to a vector before it must be: LBFGS adds each of its
    # directions with this, on every iteration, and every pass over a vector costs.
    with np.errstate(all="ignore"):
        p = a * b
        full = np.broadcast_shapes(p.shape, c.shape)
        if p.shape != full:
            p = np.broadcast_to(p, full).copy()
        ah, al = _split(a)
        bh, bl = _split(b)
        e = np.subtract(ah * bh, p)  # Dekker: p + e == a * b
        e += ah * bl
        e += al * bh
        e += al * bl
        s = p + c  # TwoSum: s + t == p + c
        bv = s - p
        t = p - (s - bv)
        t += c - bv
        w = t + e  # TwoSum: w + d == t + e
        bv = np.subtract(w, t, out=bv)
        d = t - (w - bv)
        d += e - bv
        # Rounded to odd: one ULP towards the exact value where the sum is inexact and w's last bit even,
        # up in magnitude where d has w's sign (w is finite and nonzero there: a sum that rounds to zero
        # is exact, and a non-finite one is redone in rationals below).
        bits = w.view(np.int64)
        inexact_even = (d != 0) & ((bits & 1) == 0)
        step = np.equal(np.signbit(w), np.signbit(d)).view(np.int8).astype(np.int64)
        step *= 2
        step -= 1
        np.add(bits, step, out=bits, where=inexact_even)
        r = np.add(s, w, out=s)
        zero = r == 0
        if zero.any():
            r[zero] = np.broadcast_to(a * b + c, full)[zero]
        unsafe = ~np.isfinite(r)
        if max(np.max(a), -np.min(a), np.max(b), -np.min(b)) > 2.0**995 or np.isnan(a).any() or np.isnan(b).any():
            unsafe |= np.maximum(np.abs(a), np.abs(b)) > 2.0**995
        unsafe |= _tiny(p)
        unsafe |= _tiny(w)
        unsafe |= _tiny(r)
    if unsafe.any():
        idx = np.nonzero(unsafe)
        r[idx] = [_exact(x, y, z) for x, y, z in zip(np.broadcast_to(a, full)[idx].tolist(),
                                                    np.broadcast_to(b, full)[idx].tolist(),
                                                    np.broadcast_to(c, full)[idx].tolist(), strict=True)]
    return r.reshape(shape)


def _tiny(x: np.ndarray) -> np.ndarray:
    """Nonzero terms near the subnormal range, where the splits lose bits."""
    magnitude = np.abs(x)
    return (magnitude < 2.0**-960) & (magnitude != 0)


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
