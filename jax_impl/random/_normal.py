"""torch's CPU ``normal_`` kernel in numpy: Box-Muller as ``native/cpu/DistributionTemplates.h`` computes it.

``normal_kernel`` takes one of two paths:

* **16 elements or more, contiguous** (``normal_fill``): uniforms for the
  whole tensor first (float32/float64: ``uniform_real_distribution`` of the
  tensor's type, into the tensor itself; float16/bfloat16: float uniforms
  into a 16-element buffer, block by block), then ``NormalFill16`` on each
  block of 16: ``u1 = 1 - data[j]``, ``u2 = data[j + 8]`` for ``j < 8``,
  ``radius = sqrt(-2 log u1)``, ``theta = 2 pi u2``,
  ``data[j] = fma(radius cos(theta), std, mean)``,
  ``data[j + 8] = fma(radius sin(theta), std, mean)``. When the size is
  not a multiple of 16, 16 fresh uniforms overwrite the last 16 elements
  and that block is transformed again.

  - float32 (and the float buffer of float16/bfloat16) on a CPU where
    torch dispatches AVX2 or AVX-512 kernels: ``log256_ps`` and
    ``sincos256_ps`` of ``avx_mathfun.h`` (Cephes polynomials, not the C
    library's), compiled with GCC's floating-point contraction, so that
    every ``a * b + c`` of their source is one fused multiply-add;
  - otherwise (torch's ``DEFAULT`` kernels, and every float64 tensor): the
    C library's ``log``, ``cos``, ``sin`` of the type, which this module
    calls (``logf``/``cosf``/``sinf`` through ctypes, ``math`` for double)
    so that the numbers are the same library's on the same machine.

* **fewer than 16 elements, or not contiguous**: ``normal_distribution<double>``
  element by element: ``u1``, ``u2`` double uniforms, ``r = sqrt(-2 log1p(-u2))``,
  ``theta = 2 pi u1``, the element ``r cos(theta) * std + mean``, and
  ``r sin(theta)`` kept in the generator for the next such element (the
  cache is part of the generator's state bytes).

The kernel a CPU gets is decided as torch decides it: ``ATEN_CPU_CAPABILITY``
if set, else the CPU's AVX2 and FMA flags (:func:`vectorized_float_kernel`).
The contraction reproduced is GCC's, which builds torch's Linux wheels; a
build by another compiler (clang on macOS, MSVC on Windows) may contract
otherwise, and its float32 draws of 16 or more may then differ in the last bit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import os
import platform
import numpy as np

from jax_impl._cpuinfo import cpu_flags
from jax_impl.random import _libm_loops
from jax_impl.random.fma import fma32, fma64

__all__ = ["box_muller_double", "fill16", "scale_shift", "vectorized_float_kernel"]

_F32, _F64 = np.float32, np.float64


@functools.cache
def vectorized_float_kernel() -> bool:
    """Whether torch's float ``NormalFill16`` on this CPU is the AVX2 one (``avx_mathfun.h``).

    torch picks its kernels by ``ATEN_CPU_CAPABILITY`` when set (``default`` takes the scalar ones), else by
    the CPU: AVX2 kernels need AVX2 and FMA, and its AVX-512 build of this kernel computes the same numbers.
    """
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if forced:
        return forced in ("avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return {"avx2", "fma"} <= cpu_flags()


# -- avx_mathfun.h ----------------------------------------------------------------------------------------------------

SQRTHF = _F32(0.707106781186547524)
LOG_P = [_F32(v) for v in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                            -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)]
LOG_Q1, LOG_Q2 = _F32(-2.12194440e-4), _F32(0.693359375)
MIN_NORM_POS = np.array(0x00800000, np.int32).view(_F32)
DP1, DP2, DP3 = _F32(-0.78515625), _F32(-2.4187564849853515625e-4), _F32(-3.77489497744594108e-8)
SIN_P = [_F32(-1.9515295891e-4), _F32(8.3321608736e-3), _F32(-1.6666654611e-1)]
COS_P = [_F32(2.443315711809948e-005), _F32(-1.388731625493765e-003), _F32(4.166664568298827e-002)]
FOPI = _F32(1.27323954473516)  # 4 / pi
TWO_PI_F32 = _F32(2.0 * math.pi)  # _mm256_set1_ps(2.0f * c10::pi<double>)


def log256_ps(x: np.ndarray) -> np.ndarray:
    """``log256_ps`` (float32, ``x > 0``) with its multiply-adds fused as GCC contracts them: the Horner steps,
    ``y * z + e * q1`` (the first product fused), ``y - z * 0.5`` and ``(x + y) + e * q2`` (both exact)."""
    x = np.maximum(np.asarray(x, _F32), MIN_NORM_POS)
    bits = x.view(np.int32)
    e = ((bits >> 23) - 0x7F).astype(_F32) + _F32(1)
    x = ((bits & np.int32(~0x7F800000)) | np.array(0.5, _F32).view(np.int32)).view(_F32)
    mask = x < SQRTHF
    tmp = np.where(mask, x, _F32(0))
    x = x - _F32(1)
    e = e - mask.astype(_F32)
    x = x + tmp
    z = x * x
    y = fma32(LOG_P[0], x, LOG_P[1])
    for p in LOG_P[2:]:
        y = fma32(y, x, p)
    y = y * x
    y = fma32(y, z, e * LOG_Q1)
    y = fma32(-z, _F32(0.5), y)
    return fma32(e, LOG_Q2, x + y)


def sincos256_ps(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sincos256_ps`` (float32) with GCC's contraction: the three-part reduction ``x + y * DPi``, the
    polynomials' Horner steps, ``y * z - z * 0.5`` (cosine) and ``y * x + x`` (sine) each one fused multiply-add."""
    x = np.asarray(x, _F32)
    sign_sin = x.view(np.int32) & np.int32(-0x80000000)
    x = np.abs(x)
    j = ((x * FOPI).astype(np.int32) + 1) & ~1  # cvttps: truncation
    y = j.astype(_F32)
    sign_sin = sign_sin ^ ((j & 4) << 29)
    sin_poly = (j & 2) == 0
    sign_cos = (~(j - 2) & 4) << 29
    x = fma32(y, DP1, x)
    x = fma32(y, DP2, x)
    x = fma32(y, DP3, x)
    z = x * x
    yc = fma32(COS_P[0], z, COS_P[1])
    yc = fma32(yc, z, COS_P[2])
    yc = fma32(yc * z, z, -(z * _F32(0.5)))
    yc = yc + _F32(1)
    ys = fma32(SIN_P[0], z, SIN_P[1])
    ys = fma32(ys, z, SIN_P[2])
    ys = fma32(ys * z, x, x)
    ysin2 = np.where(sin_poly, ys, _F32(0))
    ysin1 = np.where(sin_poly, _F32(0), yc)
    s = ysin1 + ysin2
    c = (yc - ysin1) + (ys - ysin2)
    return ((s.view(np.int32) ^ sign_sin).view(_F32), (c.view(np.int32) ^ sign_cos).view(_F32))


# -- the C library ------------------------------------------------------------------------------------------------------

@functools.cache
def _libm() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in ("logf", "cosf", "sinf"):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lib


def _libm_f32(name: str, x: np.ndarray) -> np.ndarray:
    fn = getattr(_libm(), name)
    return np.array([fn(v) for v in x.tolist()], _F32)


# -- NormalFill16 ---------------------------------------------------------------------------------------------------

def fill16(blocks: np.ndarray, mean: float, std: float) -> np.ndarray:
    """``NormalFill16`` on each row of ``blocks`` (``(k, 16)`` uniforms, float32 or float64) -> normals."""
    if blocks.dtype == _F64:
        return _fill16_double(blocks, mean, std)
    u1 = _F32(1) - blocks[:, :8]
    u2 = blocks[:, 8:]
    out = np.empty_like(blocks)
    std32, mean32 = _F32(std), _F32(mean)
    if vectorized_float_kernel():
        radius = np.sqrt(_F32(-2) * log256_ps(u1))
        s, c = sincos256_ps(TWO_PI_F32 * u2)
    else:
        # opmath float: -2 * logf(u1); theta computed in double (2.0f * pi<double> * u2), stored as float.
        flat1 = u1.reshape(-1)
        radius = np.sqrt(_F32(-2) * _libm_f32("logf", flat1)).reshape(u1.shape)
        theta = ((2.0 * math.pi) * u2.astype(_F64)).astype(_F32).reshape(-1)
        c = _libm_f32("cosf", theta).reshape(u2.shape)
        s = _libm_f32("sinf", theta).reshape(u2.shape)
    out[:, :8] = fma32(radius * c, std32, mean32)
    out[:, 8:] = fma32(radius * s, std32, mean32)
    return out


def _fill16_double(blocks: np.ndarray, mean: float, std: float) -> np.ndarray:
    # The C library's log, cos and sin element by element (NumPy's own log differs from it in the last bit;
    # jax_impl.random._libm_loops); the products and square root, correctly rounded either way, in NumPy.
    log, cos, sin = _libm_loops.log_cos_sin(1.0 - blocks[:, :8], (2.0 * math.pi) * blocks[:, 8:])
    radius = np.sqrt(-2 * log)
    n1 = radius * cos
    n2 = radius * sin
    out = np.empty_like(blocks)
    out[:, :8] = fma64(n1, std, mean).reshape(-1, 8)
    out[:, 8:] = fma64(n2, std, mean).reshape(-1, 8)
    return out


def scale_shift(z: np.ndarray, std: float, mean: float) -> np.ndarray:
    """``transformation::normal(z, mean, std) = z * std + mean`` (double) as torch's CPU kernel evaluates it:
    one fused multiply-add where it is built for FMA CPUs (GCC contracts it; unfused, 455 of 1,500 values
    differ from torch there), two roundings on its ``DEFAULT`` kernels."""
    z = np.asarray(z, _F64)
    if vectorized_float_kernel():
        return fma64(z, std, mean)
    return z * std + mean


def box_muller_double(u1: float, u2: float) -> tuple[float, float]:
    """``normal_distribution<double>``'s pair from two double uniforms: ``(r cos(theta), r sin(theta))`` with
    ``r = sqrt(-2 log1p(-u2))`` and ``theta = 2 pi u1``; the first is returned, the second cached."""
    r = math.sqrt(-2.0 * math.log1p(-u2))
    theta = 2.0 * math.pi * u1
    return r * math.cos(theta), r * math.sin(theta)
