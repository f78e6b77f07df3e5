"""The C library's ``log1p``, ``log``, ``cos`` and ``sin`` over NumPy arrays, as torch's CPU draws call them.

torch's double-precision transforms (``exponential_distribution``'s
``log1p(-u)``, ``normal_distribution<double>``'s Box-Muller ``log``, ``cos``
and ``sin``) call the C library element by element; NumPy's SIMD functions
differ from it in the last bit for some inputs. These functions map Python's
``math`` functions (the C library's) over the values, about 60 ns an
element, or, once the map has taken ``_COMPILE_AFTER`` elements in this
process, run loops compiled by numba that call the same functions, 5-10x
faster (:mod:`jax_impl.random._libm_compiled`). Importing numba and
loading the loops from numba's on-disk cache costs about 0.4 s (compiling
them, in the first process on a machine, about 0.65 s), which the threshold
pays for: draws made once (a model's initial values) import nothing, and a
loop's repeated draws load or compile the loops once.

A compiled loop is used only where its first results are the map's, bit for
bit, on a probe of values (a vector math library in numba would differ), and
never in a child process (a DataLoader worker must not start a compiler
whose locks its parent may hold at the fork).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["log1p_of_minus", "log_cos_sin"]

_COMPILE_AFTER = 4_000_000
_MAPPED = [0]  # elements the maps have taken in this process
_PROBE = 4096


def _mapped(function: Callable[[float], float], values: np.ndarray) -> np.ndarray:
    return np.fromiter(map(function, values.tolist()), np.float64, values.size)


def _probe() -> np.ndarray:
    values = np.random.default_rng(0).random(_PROBE)
    values[:4] = (0.0, 2.0**-53, 0.5, 1.0 - 2.0**-53)
    return values


@functools.cache
def _kernels() -> Any:
    """``(log1p_of_minus, log_cos_sin)`` compiled by numba, or ``None`` (numba absent, a child process, or
    results other than the map's on the probe)."""
    if multiprocessing.parent_process() is not None:
        return None
    try:
        from jax_impl.random import _libm_compiled
    except ImportError:  # numba is a dependency on Linux x86-64 only
        return None
    log1p_kernel, log_cos_sin_kernel = _libm_compiled.log1p_of_minus, _libm_compiled.log_cos_sin

    probe = _probe()
    angles = probe * (2.0 * math.pi)
    out, log, cos, sin = (np.empty(_PROBE) for _ in range(4))
    log1p_kernel(probe, out)
    log_cos_sin_kernel(1.0 - probe, angles, log, cos, sin)
    same = (out.tobytes() == _mapped(math.log1p, -probe).tobytes()
            and log.tobytes() == _mapped(math.log, 1.0 - probe).tobytes()
            and cos.tobytes() == _mapped(math.cos, angles).tobytes()
            and sin.tobytes() == _mapped(math.sin, angles).tobytes())
    return (log1p_kernel, log_cos_sin_kernel) if same else None


def _compiled(size: int) -> Any:
    """The compiled loops once the maps have taken ``_COMPILE_AFTER`` elements (counting ``size``), else ``None``."""
    if _MAPPED[0] < _COMPILE_AFTER:
        _MAPPED[0] += size
        return None
    return _kernels()


def log1p_of_minus(u: np.ndarray) -> np.ndarray:
    """``log1p(-u)`` (float64, flattened) with the C library's ``log1p``."""
    u = np.asarray(u, np.float64).reshape(-1)
    kernels = _compiled(u.size)
    if kernels is None:
        return _mapped(math.log1p, -u)
    out = np.empty(u.size)
    kernels[0](u, out)
    return out


def log_cos_sin(u: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log(u), cos(theta), sin(theta))`` (float64, flattened) with the C library's functions."""
    u, theta = (np.asarray(a, np.float64).reshape(-1) for a in (u, theta))
    kernels = _compiled(u.size + theta.size)
    if kernels is None:
        return _mapped(math.log, u), _mapped(math.cos, theta), _mapped(math.sin, theta)
    log, cos, sin = np.empty(u.size), np.empty(theta.size), np.empty(theta.size)
    kernels[1](u, theta, log, cos, sin)
    return log, cos, sin
