"""Matrix products and convolution sums as torch's CPU kernels round them, in float32 and in bf16.

torch's CPU bf16 GEMM and convolution (oneDNN) multiply bf16 inputs, sum the
products in float32, add the bias in float32 and round once to bf16. Summing
in bf16, or rounding before the bias is added, differs from torch in over a
quarter of the outputs; the single rounding agrees bit for bit except where
the float32 sums' order moves a value across a bf16 rounding boundary.

The backward products have the same form: torch's autograd gives the bf16
output a bf16 gradient and runs the gradient GEMMs and convolutions on bf16
operands with float32 sums, one rounding. On the CPU the gradients here are
JAX's transposes of the float32-summing forward: float32 products of the
bf16 values (exact), float32 sums, one rounding to the operand's dtype.
Elsewhere (GPUs) that transpose would run float32 products, without tensor
cores; :func:`bf16_backward` runs the transposes on bf16 operands instead
(the same exact products and one rounding, the sums in the library's order).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.nn import _precision

__all__ = ["bf16_backward", "bias_rounded", "linear", "matmul", "one_rounding"]

_HIGHEST = lax.Precision.HIGHEST


def one_rounding(x, weight) -> bool:
    """Whether a product of ``x`` and ``weight`` runs as torch's bf16 kernels: float32 sums, one rounding."""
    return x.dtype == jnp.bfloat16 and weight.dtype == jnp.bfloat16


def bf16_backward(float32_sums: Callable, bf16_result: Callable) -> Callable:
    """A bf16 product ``(a, b) -> float32 sums`` whose gradient products take bf16 operands off the CPU.

    Args:
      float32_sums: ``(a, b) -> y``, bf16 ``a`` and ``b``, float32 ``y``
        (``preferred_element_type=float32``): the forward.
      bf16_result: the same product rounded to bf16 by the library
        (no ``preferred_element_type``): its transposes are the gradient
        products on bf16 operands.

    The cotangent of ``y`` reaching here is a bf16 cotangent converted to
    float32 (``y`` is rounded to bf16 right after the bias), so casting it
    back to bf16 is exact. On the CPU the backward is the transpose of
    ``float32_sums``, as plain autodiff gives it, so CPU runs are unchanged.
    """

    @jax.custom_vjp
    def product(a, b):
        return float32_sums(a, b)

    def forward(a, b):
        return float32_sums(a, b), (a, b)

    def backward(saved, g):
        a, b = saved
        return lax.platform_dependent(
            g,
            cpu=lambda g: jax.vjp(float32_sums, a, b)[1](g),
            default=lambda g: jax.vjp(bf16_result, a, b)[1](g.astype(jnp.bfloat16)),
        )

    product.defvjp(forward, backward)
    return product


def bias_rounded(y, bias, nd: int, dtype):
    """A float32 sum ``y`` (channels on axis 1, ``nd`` axes after them) plus the bias in float32, rounded
    once to ``dtype``."""
    if bias is not None:
        y = y + jnp.reshape(bias.astype(jnp.float32), (1, -1) + (1,) * nd)
    return y.astype(dtype)


def matmul(a, b):
    """``torch.matmul`` at float32 precision "highest"; bf16 operands sum in float32 and round once."""
    if one_rounding(a, b):
        product = bf16_backward(lambda p, q: jnp.matmul(p, q, precision=_HIGHEST, preferred_element_type=jnp.float32),
                                lambda p, q: jnp.matmul(p, q, precision=_HIGHEST))
        return product(a, b).astype(a.dtype)
    return jnp.matmul(a, b, precision=_precision.matmul(jnp.result_type(a, b)))


def linear(x, weight, bias):
    """``x @ weight.T + bias``; in bf16 the bias joins the float32 sum before the one rounding."""
    if one_rounding(x, weight):
        product = bf16_backward(lambda p, q: jnp.matmul(p, q.T, precision=_HIGHEST, preferred_element_type=jnp.float32),
                                lambda p, q: jnp.matmul(p, q.T, precision=_HIGHEST))
        y = product(x, weight)
        return (y if bias is None else y + bias.astype(jnp.float32)).astype(x.dtype)
    y = jnp.matmul(x, weight.T, precision=_precision.matmul(jnp.result_type(x, weight)))
    return y if bias is None else y + bias
