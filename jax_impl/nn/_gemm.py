"""Matrix products and convolution sums as torch's CPU kernels round them, in float32 and in bf16.

torch's CPU bf16 GEMM and convolution (oneDNN) multiply bf16 inputs, sum the
products in float32, add the bias in float32 and round once to bf16. Summing
in bf16, or rounding before the bias is added, differs from torch in over a
quarter of the outputs; the single rounding agrees bit for bit except where
the float32 sums' order moves a value across a bf16 rounding boundary.

On a GPU torch runs these products on bf16 operands with float32 sums:
cuBLAS adds a GEMM's bias before its one rounding, cuDNN rounds a
convolution to bf16 and the bias is added after it, and autograd gives the
bf16 output a bf16 gradient, so the gradient products take bf16 operands
too. :func:`bf16_product` keeps the CPU's form on the CPU and takes the
GPU's off it: there the float32-summing transposes would be float32
products without tensor cores, and XLA runs a bf16-in, float32-out
convolution as a float32 one (bf16 ResNet inference ran at float32 speed).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.nn import _precision
from jax_impl.nn._conv_xla import bilinear_jvp

__all__ = ["bf16_product", "bias_rounded", "linear", "matmul", "one_rounding", "takes_onednn_matmul"]

_HIGHEST = lax.Precision.HIGHEST


def one_rounding(x, weight) -> bool:
    """Whether a product of ``x`` and ``weight`` runs as torch's bf16 kernels: float32 sums, one rounding."""
    return x.dtype == jnp.bfloat16 and weight.dtype == jnp.bfloat16


def bf16_product(float32_sums: Callable, bf16_result: Callable, *, rounded_off_cpu: bool = False) -> Callable:
    """A product of bf16 ``a`` and ``b`` returning float32: torch's CPU form on the CPU, its GPU form elsewhere.

    On the CPU the result is ``float32_sums`` and its derivatives those plain
    autodiff gives (float32 products of the bf16 values, exact, and float32
    sums). Elsewhere the derivatives are ``bf16_result`` applied to the
    tangents, so reverse mode runs its transposes on bf16 operands (the
    cotangent reaching the product is a bf16 cotangent converted to float32,
    since the caller rounds the result to bf16, so converting it back is
    exact). A ``custom_jvp`` rather than a ``custom_vjp``, so forward mode
    keeps working.

    Args:
      float32_sums: ``(a, b) -> y``, float32 ``y`` (``preferred_element_type=float32``): the sums torch's
        CPU kernels round once, after the bias.
      bf16_result: the same product rounded to bf16 by the library (no
        ``preferred_element_type``), as cuDNN / cuBLAS return it.
      rounded_off_cpu: off the CPU, return ``bf16_result`` (as float32) instead of the float32 sums:
        torch's GPU convolution, whose bias joins the bf16-rounded product.

    Returns:
      ``product(a, b) -> float32 array``.
    """

    def rounded(p, q):
        return bf16_result(p, q).astype(jnp.float32)

    def on_platform(p, q):  # as a tangent map: linear in whichever of p, q is the tangent
        return lax.platform_dependent(p, q, cpu=float32_sums, default=rounded)

    value = on_platform if rounded_off_cpu else float32_sums

    @jax.custom_jvp
    def product(a, b):
        return value(a, b)

    def jvp(primals, tangents):
        (a, b), (da, db) = primals, tangents
        return bilinear_jvp(value(a, b), da, db, lambda t: on_platform(t, b), lambda t: on_platform(a, t))

    product.defjvp(jvp, symbolic_zeros=True)
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
        product = bf16_product(lambda p, q: jnp.matmul(p, q, precision=_HIGHEST, preferred_element_type=jnp.float32),
                                lambda p, q: jnp.matmul(p, q, precision=_HIGHEST))
        return product(a, b).astype(a.dtype)
    return jnp.matmul(a, b, precision=_precision.matmul(jnp.result_type(a, b)))


def linear(x, weight, bias):
    """``x @ weight.T + bias``; in bf16 the bias joins the float32 sum before the one rounding."""
    if one_rounding(x, weight):
        product = bf16_product(lambda p, q: jnp.matmul(p, q.T, precision=_HIGHEST, preferred_element_type=jnp.float32),
                                lambda p, q: jnp.matmul(p, q.T, precision=_HIGHEST))
        y = product(x, weight)
        return (y if bias is None else y + bias.astype(jnp.float32)).astype(x.dtype)
    if takes_onednn_matmul(x, weight):
        from jax_impl.nn import _matmul_onednn  # imports jax's AD internals: only when the route is taken

        k, n = x.shape[-1], weight.shape[0]
        rows = x.reshape(-1, k)
        if bias is not None and bias.dtype == jnp.float32 and bias.shape == (n,):
            # The bias joins the sums inside the kernel, as torch's addmm: the product is written once.
            return _matmul_onednn.matmul_bias(rows, weight, bias, transpose_b=True).reshape(*x.shape[:-1], n)
        y = _matmul_onednn.matmul(rows, weight, transpose_b=True).reshape(*x.shape[:-1], n)
    else:
        y = jnp.matmul(x, weight.T, precision=_precision.matmul(jnp.result_type(x, weight)))
    return y if bias is None else y + bias


# From this many multiply-adds up oneDNN's matmul measured faster inside a train step (an LSTM LM's
# 10,000-word decoder, a ViT's MLP); below it the custom call's fixed price (its Python handler and the
# hand-over to the second core, about 70 microseconds) and its competing with XLA's concurrent ops for
# the cores cost about what its faster kernel saves (transformer steps measured no faster at 2**24).
_ONEDNN_MIN_MACS = 1 << 28


def takes_onednn_matmul(x, weight) -> bool:
    """Whether ``x @ weight.T`` runs oneDNN's matmul (:mod:`~jax_impl.nn._matmul_onednn`), torch's CPU GEMM
    kernel: float32 operands on the CPU backend, ``jax_impl.backends.mkldnn`` enabled, ``x`` at least 1-D and
    ``weight`` 2-D, at least ``2**28`` multiply-adds, under a trace (run eagerly, the custom call's own
    compile would cost more than it saves).

    XLA:CPU's dots run a transformer's linear layers at 60-80% of torch's GEMM speed and their weight
    gradients at about half; oneDNN's kernels run them at torch's, and for most shapes sum as torch's
    ``mm`` does (bit for bit).
    """
    from jax_impl.backends import mkldnn

    if (x.dtype != jnp.float32 or weight.dtype != jnp.float32 or weight.ndim != 2 or x.ndim < 1
            or not isinstance(x, jax.core.Tracer) or jax.default_backend() != "cpu"):
        return False
    rows = x.size // x.shape[-1] if x.shape[-1] else 0
    return rows * weight.shape[0] * weight.shape[1] >= _ONEDNN_MIN_MACS and mkldnn.is_enabled()
