"""torch's CPU elementwise kernels, rounding for rounding, on XLA.

The base layer under ``jax_impl.nn`` and ``jax_impl.optim``: both reproduce
sequences of torch kernels (``add_``, ``mul_``, ``lerp_``, ``addcmul_``,
``addcdiv_``, ``div``), each rounding its result once. XLA fuses a whole
sequence into one loop and lets LLVM contract ``a * b + c`` into a fused
multiply-add, so a literal transcription rounds differently. This module
spells each torch kernel so that XLA computes exactly torch's roundings:

- ``a.add(b, alpha=s)`` is ``fma(s, b, a)`` in torch's vectorised CPU kernel
  (``aten/src/ATen/native/ufunc/add.h``: ``vec::fmadd(other, alpha, self)``);
  ``a + s * b`` under XLA contracts to the same FMA.
- ``a.mul(s)`` rounds on its own. When the product feeds an addition XLA
  would fuse it into an FMA; :func:`rounded` hides the product behind an
  integer XOR with a zero that only exists at run time, which LLVM cannot
  see through, so the product is rounded first.
- ``a.lerp(b, w)`` with a scalar weight is ``fma(w, b - a, a)`` when
  ``|w| < 0.5`` and ``fma(w - 1, b - a, b)`` otherwise
  (``aten/src/ATen/native/Lerp.h``).
- ``a.addcmul(t1, t2, value=v)`` is ``fma(v * t1, t2, a)`` and
  ``a.addcdiv(t1, t2, value=v)`` is ``a + (v * t1) / t2``, three roundings
  (``aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp``).
- ``t / scalar`` is an IEEE division in torch (``cpu/BinaryOpsKernel.cpp``).
  XLA on CPU turns division by a loop-invariant scalar into multiplication
  by its reciprocal (about 1 in 3 float32 quotients off by 1 ULP), so
  :func:`div_scalar` computes the reciprocal product and one Markstein
  correction with FMAs, which yields the correctly rounded quotient.
- ``t.sqrt()`` is whichever sqrt :class:`TorchOps` is given;
  ``jax_impl.optim.set_sqrt_mode`` picks torch's CPU one for the optimizers.

All of this only holds inside a ``jax.jit``-compiled function (eagerly, every
op rounds on its own and nothing contracts); callers compile their kernels,
so jit and non-jit agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "TorchOps", "div_scalar", "lerp_branch", "lerp_branch_of_one_minus", "rounded", "runtime_zero",
    "runtime_zero_of",
]

_INT_OF_WIDTH = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}


def runtime_zero(count: jax.Array) -> jax.Array:
    """An int32 zero that XLA and LLVM cannot constant-fold: ``count >> 31`` for a count >= 0."""
    return lax.shift_right_arithmetic(count.astype(jnp.int32), jnp.int32(31))


def runtime_zero_of(x: jax.Array) -> jax.Array:
    """An int32 zero computed from ``x``'s values, for code without a step count: ``count(isnan(x[:8])) >> 31``.

    The count is over the first 8 elements: over the whole array it would cost a pass over it at every
    call, and over one element XLA turns the sum into the element itself and folds the shift of a 0-or-1
    to zero (and then the XOR of :func:`rounded`).
    """
    flat = jnp.reshape(x, (-1,))
    head = lax.slice(flat, (0,), (min(flat.shape[0], 8),))
    return lax.shift_right_arithmetic(jnp.sum(jnp.isnan(head), dtype=jnp.int32), jnp.int32(31))


@jax.custom_jvp
def rounded(x: jax.Array, zero: jax.Array) -> jax.Array:
    """``x`` unchanged, but opaque to FMA contraction: its own rounding is kept.

    Args:
      x: a floating-point array, typically a product that torch rounds
        before the next addition.
      zero: a run-time int32 zero (:func:`runtime_zero`, :func:`runtime_zero_of`);
        XOR-ing the bits with it is an identity LLVM cannot see through.

    Differentiable: the derivative is the identity's.
    """
    itype = _INT_OF_WIDTH[jnp.dtype(x.dtype).itemsize]
    bits = lax.bitcast_convert_type(x, itype)
    return lax.bitcast_convert_type(bits ^ zero.astype(itype), x.dtype)


# The identity's derivative: the bitcasts alone would cut the gradient.
rounded.defjvp(lambda primals, tangents: (rounded(*primals), tangents[0]))


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


class TorchOps:
    """torch's elementwise kernels for one compiled update.

    Args:
      zero: a run-time int32 zero (:func:`runtime_zero`), the key that keeps
        separately rounded products from being contracted into FMAs.
      sqrt: the elementwise sqrt that :meth:`sqrt` stands for (default
        ``jnp.sqrt``, IEEE); optimizers pass torch's CPU sqrt.
    """

    def __init__(self, zero: jax.Array, sqrt: Callable[[jax.Array], jax.Array] | None = None) -> None:
        self._zero = zero
        self._sqrt = jnp.sqrt if sqrt is None else sqrt

    def one(self, dtype: Any) -> jax.Array:
        """A run-time 1 of ``dtype``: ``x / ops.one(...)`` is ``x`` exactly, but XLA treats the
        division as expensive and materializes ``x`` once instead of recomputing it per consumer."""
        return (1 + self._zero).astype(dtype)

    def rounded(self, x: jax.Array) -> jax.Array:
        """``x`` unchanged, but opaque to FMA contraction (see :func:`rounded`)."""
        return rounded(x, self._zero)

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
        """``a / s`` for a scalar ``s``, correctly rounded (see :func:`div_scalar`)."""
        return div_scalar(a, s)

    def reciprocal(self, a: jax.Array) -> jax.Array:
        """``a.reciprocal()``: an IEEE ``1 / a``, kept rounded (XLA may not fold it into a later product)."""
        return self.rounded(1 / a)

    def sqrt(self, a: jax.Array) -> jax.Array:
        """``a.sqrt()`` with the sqrt this instance was given."""
        return self._sqrt(a)

    @staticmethod
    def sign(a: jax.Array) -> jax.Array:
        """``torch.sign``: NaN and -0 give +0 (``jnp.sign`` keeps NaN and -0)."""
        one = jnp.ones_like(a)
        return jnp.where(a > 0, one, jnp.where(a < 0, -one, jnp.zeros_like(a)))

    @staticmethod
    def maximum(a: jax.Array, b: jax.Array) -> jax.Array:
        """``torch.maximum``: NaN-propagating, like ``jnp.maximum``."""
        return jnp.maximum(a, b)
