"""Matrix products and convolution sums as torch's CPU kernels round them, in float32 and in bf16.

torch's CPU bf16 GEMM and convolution (oneDNN) multiply bf16 inputs, sum the
products in float32, add the bias in float32 and round once to bf16. Summing
in bf16, or rounding before the bias is added, differs from torch in over a
quarter of the outputs; the single rounding agrees bit for bit except where
the float32 sums' order moves a value across a bf16 rounding boundary.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["bias_rounded", "linear", "matmul", "one_rounding"]

_HIGHEST = lax.Precision.HIGHEST


def one_rounding(x, weight) -> bool:
    """Whether a product of ``x`` and ``weight`` runs as torch's bf16 kernels: float32 sums, one rounding."""
    return x.dtype == jnp.bfloat16 and weight.dtype == jnp.bfloat16


def bias_rounded(y, bias, nd: int, dtype):
    """A float32 sum ``y`` (channels on axis 1, ``nd`` axes after them) plus the bias in float32, rounded
    once to ``dtype``."""
    if bias is not None:
        y = y + jnp.reshape(bias.astype(jnp.float32), (1, -1) + (1,) * nd)
    return y.astype(dtype)


def matmul(a, b):
    """``torch.matmul`` at float32 precision "highest"; bf16 operands sum in float32 and round once."""
    if one_rounding(a, b):
        return jnp.matmul(a, b, precision=_HIGHEST, preferred_element_type=jnp.float32).astype(a.dtype)
    return jnp.matmul(a, b, precision=_HIGHEST)


def linear(x, weight, bias):
    """``x @ weight.T + bias``; in bf16 the bias joins the float32 sum before the one rounding."""
    if one_rounding(x, weight):
        y = jnp.matmul(x, weight.T, precision=_HIGHEST, preferred_element_type=jnp.float32)
        return (y if bias is None else y + bias.astype(jnp.float32)).astype(x.dtype)
    y = jnp.matmul(x, weight.T, precision=_HIGHEST)
    return y if bias is None else y + bias
