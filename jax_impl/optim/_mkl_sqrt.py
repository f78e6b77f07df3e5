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

The emulation reduces ``x`` to [1, 4) on the integer bits, evaluates
``rsqrt14`` with Intel's published reference algorithm (RECIP14.c, a 64-entry
integer table), and runs MKL's FMA sequence on hardware FMAs (XLA contracts
each single-use ``a * b + c``). It costs about 1.4x a plain ``jnp.sqrt``.
Exact for every normal input (tests sweep all 2**24 floats of [1, 4) and
random bit patterns against torch); zeros, infinities, NaN and negatives
follow IEEE sqrt (torch's NaN for negatives has another sign bit), and
subnormal inputs give 0, as everything subnormal does under XLA:CPU's
flush-to-zero. docs/mkl_sqrt.md has the research, including a slower,
FMA-free variant exact on all 2**32 float32 bit patterns.

With ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (or on CPUs without AVX-512) MKL's
sqrt is IEEE-exact, and ``jnp.sqrt`` is the match; see
:func:`jax_impl.optim.set_sqrt_mode`.
"""

from __future__ import annotations

from typing import Any

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

def _rsqrt14_core(p, m23):
    """Intel VRSQRT14 of xs = (1 + m23/2^23) * 2^p, p in {0,1}; int32 bits of a float32 in [0.5,1]."""
    i = m23 >> 18
    t = ((m23 & ~0xFF) - (i << 18) - (1 << 17)) >> 8  # in [-512, 512)
    idx = p * 32 + i
    # idx is in [0, 64) by construction: skip jnp's negative-index and bounds handling.
    c = jnp.asarray(_C_TAB).at[idx].get(mode="promise_in_bounds")
    d = jnp.asarray(_D_TAB).at[idx].get(mode="promise_in_bounds")
    w = c * 128 - d * t  # in [2^25, 2^26)
    w = w & ~0x1FF  # truncate to 17 significant bits
    core = (126 << 23) + ((w - (1 << 25)) >> 2)
    return jnp.where((m23 == 0) & (p == 0), 0x3F800000, core)  # rsqrt14(4^k) is exact


def _mkl_sqrt(x: jax.Array, float_type: Any, int_type: Any, mantissa_bits: int, bias: int) -> jax.Array:
    bits = lax.bitcast_convert_type(x, int_type)
    biased_exponent = (bits >> mantissa_bits) & (2 * bias + 1)
    mantissa = bits & ((int_type(1) << mantissa_bits) - 1)
    exponent = biased_exponent - bias
    parity = exponent & 1
    half_exponent = exponent >> 1  # floor(E / 2): x = xs * 4**half_exponent
    xs = lax.bitcast_convert_type(((bias + parity) << mantissa_bits) | mantissa, float_type)  # in [1, 4)
    m23 = (mantissa >> (mantissa_bits - 23)).astype(jnp.int32)
    r = lax.bitcast_convert_type(_rsqrt14_core(parity.astype(jnp.int32), m23), jnp.float32).astype(float_type)
    h = r * float_type(0.5)
    y = xs * r
    # Each `a * b + c` below has a single-use product, which XLA (CPU and GPU)
    # contracts into a hardware FMA: MKL's vfmadd, rounding for rounding.
    if float_type == jnp.float64:  # MKL's float64 kernel: one Goldschmidt step first
        t = -y * h + float_type(0.5)
        y, h = t * y + y, t * h + h
    e = -y * y + xs
    s = e * h + y  # in [1, 2]
    out = lax.bitcast_convert_type(lax.bitcast_convert_type(s, int_type) + (half_exponent << mantissa_bits), float_type)
    # Everything else, without a second sqrt: +-0 -> +-0 and subnormals -> 0
    # (XLA:CPU treats them as zero anyway), +inf -> +inf, negatives and NaN -> NaN.
    normal = (biased_exponent > 0) & (biased_exponent < 2 * bias + 1) & (bits > 0)
    special = jnp.where(x == jnp.inf, x, jnp.where(x >= 0, x * float_type(0), float_type(jnp.nan)))
    return jnp.where(normal, out, special)


def torch_sqrt_f32(x: jax.Array) -> jax.Array:
    """torch's CPU float32 sqrt (MKL AVX-512 kernel), bit for bit on normal inputs. No x64 needed."""
    return _mkl_sqrt(jnp.asarray(x, jnp.float32), jnp.float32, jnp.int32, 23, 127)


def torch_sqrt_f64(x: jax.Array) -> jax.Array:
    """torch's CPU float64 sqrt (MKL AVX-512 kernel), bit for bit on normal inputs. Needs x64."""
    return _mkl_sqrt(jnp.asarray(x, jnp.float64), jnp.float64, jnp.int64, 52, 1023)


def mkl_sqrt(x: jax.Array) -> jax.Array:
    """torch's MKL AVX-512 sqrt for float32 or float64 ``x`` (float64 needs x64)."""
    if x.dtype == jnp.float64:
        return torch_sqrt_f64(x)
    if x.dtype == jnp.float32:
        return torch_sqrt_f32(x)
    raise NotImplementedError(f"MKL sqrt emulation for {x.dtype} (only float32 and float64)")
