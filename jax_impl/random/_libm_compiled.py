"""The loops of :mod:`jax_impl.random._libm_loops`, compiled by numba and kept in numba's on-disk cache.

Each loop calls the C library's function element by element (numba lowers
``math.log1p``, ``math.log``, ``math.cos`` and ``math.sin`` to calls of the
C library's symbols), as torch's double-precision draws do. The loops hold
no address of the process, so numba keeps them in its cache (beside this
file, else numba's user-wide cache folder or ``NUMBA_CACHE_DIR``): the first
process on a machine compiles them (about half a second), later ones load
them. Where no folder can hold the cache they are compiled in each process.

This module imports numba: :mod:`jax_impl.random._libm_loops` imports it
only when its maps have taken enough elements to pay for that.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from numba import njit, types
from numba.core.errors import NumbaWarning

__all__ = ["log1p_of_minus", "log_cos_sin"]


def _compile(signature: Any, function: Callable[..., None]) -> Any:
    """``function`` compiled for ``signature`` (now: loaded from numba's cache, or compiled and cached where
    numba finds a folder), releasing the GIL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaWarning)  # no writable cache folder: compiled each time
        try:
            return njit(signature, nogil=True, cache=True)(function)
        except RuntimeError:  # numba found no folder to cache in at all
            return njit(signature, nogil=True)(function)


# Float64 vectors of any strides; the inputs may be read-only (a view of a JAX array).
_IN, _OUT = types.Array(types.float64, 1, "A", readonly=True), types.float64[:]


def _log1p_of_minus(u, out):  # pragma: no cover - compiled
    for i in range(u.shape[0]):
        out[i] = math.log1p(-u[i])


def _log_cos_sin(u, theta, log, cos, sin):  # pragma: no cover - compiled
    for i in range(u.shape[0]):
        log[i] = math.log(u[i])
    for i in range(theta.shape[0]):
        cos[i] = math.cos(theta[i])
        sin[i] = math.sin(theta[i])


#: ``log1p_of_minus(u, out)``: ``out[i] = log1p(-u[i])`` over float64 vectors.
log1p_of_minus = _compile(types.void(_IN, _OUT), _log1p_of_minus)
#: ``log_cos_sin(u, theta, log, cos, sin)``: ``log[i] = log(u[i])``, ``cos[j] = cos(theta[j])``,
#: ``sin[j] = sin(theta[j])`` over float64 vectors.
log_cos_sin = _compile(types.void(_IN, _IN, _OUT, _OUT, _OUT), _log_cos_sin)
