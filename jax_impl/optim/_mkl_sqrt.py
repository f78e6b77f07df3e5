"""Bit-exact emulation of torch's CPU ``sqrt`` on x86 with MKL's AVX-512 kernels.

torch computes float32/float64 ``sqrt`` on CPU with MKL VML (``vsSqrt`` /
``vdSqrt``, high-accuracy mode). On AVX-512 CPUs MKL runs
``mkl_vml_kernel_{s,d}Sqrt_Z0HAynn``, disassembled here as::

    r = vrsqrt14ps(x)              # approximate 1/sqrt(x), exactly specified by Intel
    h = r * 0.5
    y = x * r                      # rounded
    e = fma(-y, y, x)
    s = fma(e, h, y)               # the result

float64 adds one Goldschmidt step (``t = fma(-y, h, 0.5); y = fma(t, y, y);
h = fma(t, h, h)``) before the final correction. 0.59% of float32 results
(in a sweep of [1, 4)) are 1 ULP below IEEE sqrt. Negative inputs give +NaN.

The emulation reduces ``x`` to [1, 4) on the integer bits (XLA:CPU flushes
subnormals, so no subnormal is ever touched as a float), evaluates
``rsqrt14`` with Intel's published reference algorithm (RECIP14.c, a 64-entry
integer table), and computes each FMA exactly with Dekker's TwoProduct and
Boldo-Melquiond round-to-odd, so it depends on neither hardware FMA nor XLA's
contraction choices. Verified: float32, all 2**32 bit patterns; float64,
23M mixed inputs (research notes of this project).

With ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (or on CPUs without AVX-512) MKL's
sqrt is IEEE-exact, and ``jnp.sqrt`` is the match; see
:func:`jax_impl.optim.set_sqrt_mode`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["mkl_sqrt", "torch_sqrt_f32", "torch_sqrt_f64"]

# Intel RECIP14.c RSQRT14_Coeff: per i (0..31): d1, c1 (x in [1,2)), d2, c2 (x in [2,4))
_COEF = np.array([
  1001, 520261, 707, 367881, 955, 512437, 675, 362349,
  915,  504953, 647, 357056, 877, 497790, 619, 351992,
  841,  490922, 595, 347136, 807, 484331, 571, 342475,
  775,  478001, 549, 337997, 747, 471909, 527, 333693,
  719,  466046, 509, 329545, 693, 460397, 491, 325551,
  669,  454947, 473, 321697, 647, 449688, 457, 317977,
  625,  444606, 441, 314385, 603, 439694, 427, 310910,
  585,  434939, 413, 307549, 567, 430335, 401, 304295,
  549,  425875, 389, 301139, 533, 421551, 377, 298079,
  517,  417355, 365, 295115, 501, 413284, 355, 292237,
  487,  409329, 345, 289439, 473, 405487, 335, 286722,
  461,  401748, 325, 284080, 449, 398111, 317, 281508,
  437,  394571, 309, 279006, 425, 391127, 301, 276569,
  415,  387770, 293, 274195, 403, 384498, 285, 271882,
  393,  381307, 279, 269625, 385, 378194, 271, 267425,
  375,  375155, 265, 265276, 367, 372190, 259, 263178], dtype=np.int32).reshape(32, 4)
_C_TAB = np.concatenate([_COEF[:, 1], _COEF[:, 3]]).astype(np.int32)   # index p*32 + i
_D_TAB = np.concatenate([_COEF[:, 0], _COEF[:, 2]]).astype(np.int32)

# per-dtype constants: (float, int, mantissa bits, bias, split mask keeping hi part)
_F32 = (jnp.float32, jnp.int32, 23, 127, ~0xFFF)            # hi: 12 significant bits
_F64 = (jnp.float64, jnp.int64, 52, 1023, ~((1 << 26) - 1))  # hi: 27 significant bits


def _bits(v, it):
    return lax.bitcast_convert_type(v, it)


def _flt(v, ft):
    return lax.bitcast_convert_type(v, ft)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a, cfg):
    ft, it, _, _, mask = cfg
    hi = _flt(_bits(a, it) & mask, ft)        # truncation split, contraction-proof
    return hi, a - hi


def _two_prod(a, b, cfg):
    p = a * b
    ah, al = _split(a, cfg)
    bh, bl = _split(b, cfg)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _add_round_to_odd(a, b, cfg):
    ft, it = cfg[0], cfg[1]
    s, err = _two_sum(a, b)
    sb = _bits(s, it)
    inexact_even = (err != 0) & ((sb & 1) == 0)
    away = (err > 0) == (s > 0)                  # move 1 ulp (in magnitude) toward exact value
    return _flt(jnp.where(inexact_even, sb + jnp.where(away, 1, -1).astype(it), sb), ft)


def _fma(a, b, c, cfg=_F32):
    """RN(a*b + c) exactly (Boldo & Melquiond 2008), valid without over/underflow."""
    uh, ul = _two_prod(a, b, cfg)
    th, tl = _two_sum(c, uh)
    return th + _add_round_to_odd(tl, ul, cfg)


def _rsqrt14_core(p, m23):
    """Intel VRSQRT14 of xs = (1 + m23/2^23) * 2^p, p in {0,1}; int32 bits of a float32 in [0.5,1]."""
    i = m23 >> 18
    t = ((m23 & ~0xFF) - (i << 18) - (1 << 17)) >> 8           # in [-512, 512)
    idx = p * 32 + i
    w = jnp.asarray(_C_TAB)[idx] * 128 - jnp.asarray(_D_TAB)[idx] * t   # in [2^25, 2^26)
    w = w & ~0x1FF                                              # truncate to 17 significant bits
    core = (126 << 23) + ((w - (1 << 25)) >> 2)
    return jnp.where((m23 == 0) & (p == 0), 0x3F800000, core)   # rsqrt14(4^k) is exact


def _torch_sqrt(x, cfg):
    ft, it, mb, bias, _ = cfg
    one = it(1)
    bits = _bits(x, it)
    mmask = (one << mb) - 1
    ebits = (bits >> mb) & (2 * bias + 1)
    mraw = bits & mmask
    sub = ebits == 0
    nbits = 32 if it == jnp.int32 else 64
    lz = jnp.where(sub, lax.clz(jnp.maximum(mraw, one)) - (nbits - 1 - mb), 0)
    m = jnp.where(sub, (mraw << lz) & mmask, mraw)
    E = jnp.where(sub, 1 - bias - lz, ebits - bias)
    p = E & 1
    k = E >> 1                                                  # floor(E/2)
    xs = _flt(((bias + p) << mb) | m, ft)                       # in [1, 4)
    m23 = (m >> (mb - 23)).astype(jnp.int32)
    r = _rsqrt14_core(p.astype(jnp.int32), m23)
    r = lax.bitcast_convert_type(r, jnp.float32).astype(ft)     # exact (17 bits)
    h = r * ft(0.5)
    y = xs * r
    if ft == jnp.float64:                                       # extra Goldschmidt step
        t = _fma(-y, h, ft(0.5), cfg)
        y, h = _fma(t, y, y, cfg), _fma(t, h, h, cfg)
    e = _fma(-y, y, xs, cfg)
    s = _fma(e, h, y, cfg)                                      # in [1, 2]
    out = _flt(_bits(s, it) + (k << mb), ft)
    # specials, decided on the integer bits (XLA:CPU treats subnormals as zero in float compares)
    absb = bits & ((one << (nbits - 1)) - 1)
    inf_b = ((2 * bias + 1) << mb)
    qnan = _flt(jnp.asarray(inf_b | (one << (mb - 1)), it), ft)
    out = jnp.where(absb == 0, x, out)                          # +-0 -> +-0
    out = jnp.where(bits == inf_b, x, out)                      # +inf -> +inf
    out = jnp.where((bits < 0) & (absb != 0), qnan, out)        # x < 0 -> +qNaN
    out = jnp.where(absb > inf_b, _flt(bits | (one << (mb - 1)), ft), out)  # NaN -> quiet NaN
    return out


def torch_sqrt_f32(x: jax.Array) -> jax.Array:
    """Bit-exact torch.sqrt for CPU float32 (MKL AVX-512 path). Elementwise, jit-able, no x64."""
    return _torch_sqrt(jnp.asarray(x, jnp.float32), _F32)


def torch_sqrt_f64(x: jax.Array) -> jax.Array:
    """Bit-exact torch.sqrt for CPU float64 (MKL AVX-512 path). Needs jax_enable_x64."""
    return _torch_sqrt(jnp.asarray(x, jnp.float64), _F64)


def mkl_sqrt(x: jax.Array) -> jax.Array:
    """torch's MKL AVX-512 sqrt for float32 or float64 ``x`` (float64 needs x64)."""
    if x.dtype == jnp.float64:
        return torch_sqrt_f64(x)
    if x.dtype == jnp.float32:
        return torch_sqrt_f32(x)
    raise NotImplementedError(f"MKL sqrt emulation for {x.dtype} (only float32 and float64)")
