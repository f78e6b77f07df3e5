"""torch's CPU elementwise kernels, rounding for rounding, on XLA.

torch's optimizers are sequences of in-place kernels (``add_``, ``mul_``,
``lerp_``, ``addcmul_``, ``addcdiv_``, ``sqrt``, ``div``), each rounding its
result once. XLA fuses a whole update into one loop and lets LLVM contract
``a * b + c`` into a fused multiply-add, so a literal transcription rounds
differently. This module spells each torch kernel so that XLA computes
exactly torch's roundings (see shared/REFERENCE-optim.md section 0):

- ``a.add(b, alpha=s)`` is ``fma(s, b, a)`` in torch's vectorised CPU kernel;
  ``a + s * b`` under XLA contracts to the same FMA.
- ``a.mul(s)`` rounds on its own. When the product feeds an addition XLA
  would fuse it into an FMA; :meth:`TorchOps.mul` hides the product behind an
  integer XOR with a zero that only exists at run time, which LLVM cannot
  see through, so the product is rounded first.
- ``a.lerp(b, w)`` with a scalar weight is ``fma(w, b - a, a)`` when
  ``|w| < 0.5`` and ``fma(w - 1, b - a, b)`` otherwise (ATen's Lerp.h).
- ``a.addcmul(t1, t2, value=v)`` is ``fma(v * t1, t2, a)`` in torch's build.
- ``a.addcdiv(t1, t2, value=v)`` is ``a + (v * t1) / t2``, three roundings.
- ``t / scalar`` is an IEEE division in torch. XLA on CPU turns division by a
  loop-invariant scalar into multiplication by its reciprocal (about 1 in 3
  float32 quotients off by 1 ULP), so :meth:`TorchOps.div_scalar` computes the
  reciprocal product and one Markstein correction with FMAs, which yields the
  correctly rounded quotient.
- ``t.sqrt()``: MKL's VML sqrt, not IEEE, on AVX-512 CPUs; see :func:`set_sqrt_mode`.

All of this only holds inside a ``jax.jit``-compiled function (eagerly, every
op rounds on its own and nothing contracts); the optimizers compile their
per-step kernel, so jit and non-jit agree.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["TorchOps", "get_sqrt_mode", "get_sqrt_table", "lerp_branch", "lerp_branch_of_one_minus", "runtime_zero",
           "set_sqrt_mode", "set_sqrt_table", "torch_sqrt"]

_INT_OF_WIDTH = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}


def lerp_branch(weight: Any) -> bool | None:
    """ATen's lerp branch (``|w| < 0.5``) for a weight known on the host, or ``None``.

    ``weight`` is torch's float64 value; ATen compares it after rounding to the
    parameter's dtype, so a branch is returned only where float32 and float64
    agree (else the kernel keeps the run-time select). Schedules give ``None``.
    """
    if callable(weight) or weight is None:
        return None
    small32, small64 = abs(np.float32(weight)) < 0.5, abs(np.float64(weight)) < 0.5
    return bool(small64) if small32 == small64 else None


def lerp_branch_of_one_minus(beta: Any) -> bool | None:
    """:func:`lerp_branch` of the lerp weight ``1 - beta`` (``None`` when ``beta`` is a schedule)."""
    return lerp_branch(None if callable(beta) else 1 - beta)


def runtime_zero(count: jax.Array) -> jax.Array:
    """An int32 zero that XLA and LLVM cannot constant-fold: ``count >> 31`` for count >= 0."""
    return lax.shift_right_arithmetic(count.astype(jnp.int32), jnp.int32(31))


_SQRT_MODES = ("ieee", "mkl-avx512", "table")
_sqrt_mode = "ieee"
_sqrt_table: Any = None  # float32[2**24]: torch.sqrt on [1, 4), for mode "table"


def set_sqrt_mode(mode: str) -> None:
    """Chooses which ``sqrt`` torch is matched with, for optimizers built afterwards.

    - ``"ieee"`` (default): correctly rounded ``jnp.sqrt``. Matches torch on
      CUDA, on CPUs without AVX-512, with ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
      and ``fused=True`` CPU optimizers.
    - ``"mkl-avx512"``: bit-exact emulation of MKL VML's AVX-512 ``vsSqrt``/
      ``vdSqrt``, which torch's default CPU optimizers call on AVX-512 x86
      machines (0.6% of float32 results are 1 ULP below IEEE).

    - ``"table"``: float32 sqrt read from a table of torch's own values on
      [1, 4) (:func:`set_sqrt_table`), exact for any MKL path and CPU (e.g.
      AMD, where MKL's sqrt is neither of the above); float64 stays IEEE.

    ``parity.numerics.match_torch_sqrt()`` probes the installed torch and sets it.
    """
    global _sqrt_mode
    if mode not in _SQRT_MODES:
        raise ValueError(f"sqrt mode must be one of {_SQRT_MODES}, got {mode!r}")
    if mode == "table" and _sqrt_table is None:
        raise ValueError("sqrt mode 'table' needs set_sqrt_table(parity.numerics.torch_sqrt_table()) first")
    _sqrt_mode = mode


def set_sqrt_table(table: Any) -> None:
    """Registers torch's float32 sqrt on [1, 4) (``2**24`` values, see ``jax_impl.optim._table_sqrt``)."""
    global _sqrt_table
    from jax_impl.optim._table_sqrt import TABLE_SIZE

    array = np.asarray(table)
    if array.shape != (TABLE_SIZE,) or array.dtype != np.float32:
        raise ValueError(f"a sqrt table is float32[{TABLE_SIZE}], got {array.dtype}{list(array.shape)}")
    _sqrt_table = array


def get_sqrt_mode() -> str:
    return _sqrt_mode


def get_sqrt_table() -> Any:
    return _sqrt_table


def torch_sqrt(x: jax.Array, mode: str | None = None, table: Any = None) -> jax.Array:
    """torch's CPU ``sqrt`` under ``mode`` (default: the current :func:`set_sqrt_mode`)."""
    if (mode or _sqrt_mode) == "table" and x.dtype == jnp.float32:
        from jax_impl.optim._table_sqrt import table_sqrt

        return table_sqrt(x, table if table is not None else _sqrt_table)
    if (mode or _sqrt_mode) == "mkl-avx512" and x.dtype in (jnp.float32, jnp.float64):
        from jax_impl.optim._mkl_sqrt import mkl_sqrt

        return mkl_sqrt(x)
    return jnp.sqrt(x)


class TorchOps:
    """torch's elementwise kernels for one compiled update.

    Args:
      zero: a run-time int32 zero (:func:`runtime_zero`), the key that keeps
        separately rounded products from being contracted into FMAs.
    """

    def __init__(self, zero: jax.Array, sqrt_mode: str = "ieee", sqrt_table: Any = None) -> None:
        self._zero = zero
        self._sqrt_mode = sqrt_mode
        self._sqrt_table = sqrt_table

    def one(self, dtype: Any) -> jax.Array:
        """A run-time 1 of ``dtype``: ``x / ops.one(...)`` is ``x`` exactly, but XLA treats the
        division as expensive and materializes ``x`` once instead of recomputing it per consumer."""
        return (1 + self._zero).astype(dtype)

    def rounded(self, x: jax.Array) -> jax.Array:
        """``x`` unchanged, but opaque to FMA contraction (its rounding is kept)."""
        itype = _INT_OF_WIDTH[jnp.dtype(x.dtype).itemsize]
        bits = lax.bitcast_convert_type(x, itype)
        return lax.bitcast_convert_type(bits ^ self._zero.astype(itype), x.dtype)

    def mul(self, a: jax.Array, s: jax.Array) -> jax.Array:
        """``a.mul(s)``: one rounding, never fused into a following add."""
        return self.rounded(a * s)

    @staticmethod
    def add(a: jax.Array, b: jax.Array, alpha: jax.Array | float = 1.0) -> jax.Array:
        """``a.add(b, alpha=alpha)`` = ``fma(alpha, b, a)``."""
        if isinstance(alpha, float) and alpha == 1.0:
            return a + b
        return a + alpha * b

    @staticmethod
    def lerp(a: jax.Array, b: jax.Array, w: jax.Array, small_weight: bool | None = None) -> jax.Array:
        """``a.lerp(b, w)`` for a scalar weight, ATen's two FMA branches.

        ``small_weight`` (from :func:`lerp_branch`) picks the branch when the weight is known on
        the host: the kernel then computes one branch instead of both and a select.
        """
        diff = b - a
        if small_weight is True:
            return a + w * diff
        if small_weight is False:
            return b + (w - 1) * diff
        return jnp.where(jnp.abs(w) < 0.5, a + w * diff, b + (w - 1) * diff)

    def addcmul(self, a: jax.Array, t1: jax.Array, t2: jax.Array, value: jax.Array | float = 1.0) -> jax.Array:
        """``a.addcmul(t1, t2, value=v)`` = ``fma(round(v * t1), t2, a)``.

        ``v * t1`` is kept opaque: XLA could otherwise reassociate
        ``(v * t1) * t2`` into ``v * (t1 * t2)`` (seen for ``t1 is t2`` in float64).
        """
        if isinstance(value, float) and value == 1.0:
            return a + t1 * t2
        return a + self.mul(t1, value) * t2

    def addcdiv(self, a: jax.Array, t1: jax.Array, t2: jax.Array, value: jax.Array | float = 1.0) -> jax.Array:
        """``a.addcdiv(t1, t2, value=v)`` = ``a + round(v * t1) / t2``."""
        if isinstance(value, float) and value == 1.0:
            return a + t1 / t2
        return a + self.mul(t1, value) / t2

    @staticmethod
    def div_scalar(a: jax.Array, s: jax.Array) -> jax.Array:
        """``a / s`` for a scalar ``s``, correctly rounded (IEEE, as torch's CPU kernel).

        ``q = a * (1/s)`` is within an ULP; the residual ``a - q * s`` is exact
        as an FMA, and ``q + residual * (1/s)`` (another FMA) rounds to the
        correctly rounded quotient (Markstein's theorem).
        """
        reciprocal = 1 / s
        quotient = a * reciprocal
        residual = a - quotient * s
        return quotient + residual * reciprocal

    def reciprocal(self, a: jax.Array) -> jax.Array:
        """``a.reciprocal()``: an IEEE ``1 / a``, kept rounded (XLA may not fold it into a later product)."""
        return self.rounded(1 / a)

    def sqrt(self, a: jax.Array) -> jax.Array:
        """``a.sqrt()`` as torch's CPU build computes it (see :func:`set_sqrt_mode`)."""
        return torch_sqrt(a, self._sqrt_mode, self._sqrt_table)

    @staticmethod
    def sign(a: jax.Array) -> jax.Array:
        """``torch.sign``: NaN and -0 give +0 (``jnp.sign`` keeps NaN and -0)."""
        one = jnp.ones_like(a)
        return jnp.where(a > 0, one, jnp.where(a < 0, -one, jnp.zeros_like(a)))

    @staticmethod
    def maximum(a: jax.Array, b: jax.Array) -> jax.Array:
        """``torch.maximum``: NaN-propagating, like ``jnp.maximum``."""
        return jnp.maximum(a, b)
