"""torch's ``reduction`` argument, CPU ``mean`` and elementwise division for the losses outside ``_functional_loss``.

``mean`` is ``sum() / numel`` with torch's correctly rounded division, forward
and backward (``mean_backward`` is ``grad.expand(shape) / numel``). XLA:CPU
turns a division by a scalar, even a run-time one, into a product with its
reciprocal (1 ULP off for about half of float32 quotients), so the quotient
goes through :func:`jax_impl.kernels.div_scalar`. Its algebraic simplifier
also rewrites ``a / broadcast(b)`` into a product with reciprocals and
``(a / b) / c`` into ``a / (b * c)``; :func:`true_divide` keeps torch's
one IEEE division per element.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.kernels import div_scalar, rounded, runtime_zero_of

__all__ = ["divide_by_count", "get_enum", "mean", "reduce", "rounded_alone", "sum_to", "true_divide"]


def rounded_alone(x: jax.Array) -> jax.Array:
    """``x`` (typically a product) kept out of FMA contraction, as torch rounds it before the next op.

    The run-time zero comes from ``x`` itself: a zero derived from another
    operand that happens to be a compile-time constant would fold away and
    let LLVM contract ``x`` into the following addition.
    """
    return rounded(x, runtime_zero_of(x))


def get_enum(reduction: str) -> str:
    """``torch.nn._reduction.get_enum``: validate ``reduction``, mapping ``'elementwise_mean'`` to ``'mean'``."""
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use reduction='mean' instead.", stacklevel=3)
        return "mean"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def divide_by_count(a: jax.Array, count: int) -> jax.Array:
    """``a / count``, correctly rounded as torch's CPU ``div`` by a scalar; backward ``g / count`` likewise."""
    # Rounding ``a`` first keeps XLA from merging an earlier scalar factor of ``a`` with ``1 / count``;
    # the barrier keeps it from folding ``(a * (1 / c)) * c`` for a constant ``c``.
    a = rounded(a, runtime_zero_of(a))
    c = lax.optimization_barrier(jnp.asarray(np.asarray(count, np.float64).astype(a.dtype)))
    # The correction step turns an infinite quotient into inf - inf = NaN.
    return jnp.where(jnp.isfinite(a), div_scalar(a, c), a / c)


divide_by_count.defvjp(
    lambda a, count: (divide_by_count(a, count), None),
    lambda count, _, g: (divide_by_count(g, count),),
)


def mean(x: jax.Array) -> jax.Array:
    """torch's CPU ``x.mean()``: ``x.sum() / x.numel()`` (NaN for an empty ``x``)."""
    return divide_by_count(jnp.sum(x), x.size)


def reduce(loss: jax.Array, reduction: str) -> jax.Array:
    """``apply_loss_reduction``: ``'mean'`` -> :func:`mean`, ``'sum'`` -> ``sum``, ``'none'`` -> ``loss``."""
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    return loss



def sum_to(a: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``at::sum_to``: sum the broadcast axes of ``a`` back to ``shape``."""
    lead = a.ndim - len(shape)
    a = jnp.sum(a, axis=tuple(range(lead))) if lead else a
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return jnp.sum(a, axis=axes, keepdims=True) if axes else a


def _ieee_divide(a: jax.Array, b: jax.Array) -> jax.Array:
    shape = jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b))
    a, b = lax.optimization_barrier((a, jnp.broadcast_to(b, shape)))
    return a / b


@jax.custom_vjp
def true_divide(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a / b`` elementwise with broadcasting, one IEEE division per element as torch's ``div``.

    The barriers hide a broadcast or constant divisor and a quotient
    numerator from XLA's rewrites (module docstring). The backward is
    torch's ``DivBackward0``: ``g / b`` for ``a`` and ``-(g * ((a / b) / b))``
    for ``b``, each summed back over broadcast axes.
    """
    return _ieee_divide(a, b)


def _true_divide_bwd(res, g):
    a, b = res
    ga = sum_to(_ieee_divide(g, b), jnp.shape(a))
    gb = sum_to(-rounded_alone(g * _ieee_divide(_ieee_divide(a, b), b)), jnp.shape(b))
    return ga, gb


true_divide.defvjp(lambda a, b: (_ieee_divide(a, b), (a, b)), _true_divide_bwd)
