"""XLA's own 2-D convolution and the pieces every route of ``_fast_conv`` shares.

- :func:`plain`: ``lax.conv_general_dilated`` exactly as
  ``jax_impl.nn.functional`` writes every other conv (NCHW / OIHW, highest
  precision unless TF32 is allowed on a GPU: :mod:`~jax_impl.nn._precision`);
- :func:`bilinear_jvp`, :func:`transpose_of`, :func:`conv_with_grads`: a
  conv's ``custom_jvp`` built from the linear maps its gradients should run;
- :data:`YNN_CONVS`: whether this process's XLA hands convolutions to
  YNNPACK (read from ``XLA_FLAGS``, which XLA reads once, at backend start).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from jax_impl.nn import _precision

__all__ = [
    "HIGHEST", "NCHW", "YNN_CONVS", "YNN_FEATURE_THRESHOLD", "bilinear_jvp", "conv_with_grads", "out_size", "plain",
    "transpose_of", "ynn_takes_convs",
]

HIGHEST = lax.Precision.HIGHEST
NCHW = ("NCHW", "OIHW", "NCHW")

# YNNPACK takes a 2-D conv when max(input features, output features) > 16
# (xla/backends/cpu/ynn_support.cc, IsConvolutionOpSupportedByYnn); for the
# weight-gradient conv those are N and C_out.
YNN_FEATURE_THRESHOLD = 16


def ynn_takes_convs(xla_flags: str | None = None) -> bool:
    """Whether XLA:CPU hands convolutions to YNNPACK under ``xla_flags`` (default: ``$XLA_FLAGS``).

    False when ``--xla_cpu_experimental_ynn_fusion_type=`` (all YNNPACK
    fusions off), ``=-individual_convolution`` (only convolutions off), or a
    list without +/- signs (it replaces the default set) that leaves
    ``individual_convolution`` out.
    """
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    found = re.findall(r"--xla_cpu_experimental_ynn_fusion_type=(\S*)", flags)
    if not found:
        return True
    items = [v.strip().lower() for v in found[-1].split(",") if v.strip()]
    if not items or items == ["invalid"]:
        return False
    if "-individual_convolution" in items:
        return False
    if all(v[0] in "+-" for v in items):
        return True
    return "individual_convolution" in [v.lstrip("+") for v in items]


# Read once: XLA reads XLA_FLAGS once, when the CPU backend starts.
YNN_CONVS = ynn_takes_convs()


def plain(x, w, stride, pads, dilation):
    """XLA's own convolution, exactly as ``jax_impl.nn.functional`` writes every other conv."""
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=pads, rhs_dilation=dilation, dimension_numbers=NCHW,
        precision=_precision.conv(jnp.result_type(x, w)),
    )


def out_size(x_shape, w_shape, stride, pads, dilation) -> tuple[int, int]:
    """``(Ho, Wo)`` of a 2-D conv, torch's formula."""
    return tuple((x_shape[2 + a] + pads[a][0] + pads[a][1] - dilation[a] * (w_shape[2 + a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def bilinear_jvp(y, dx, dw, input_tangent, weight_tangent):
    """``(y, input_tangent(dx) + weight_tangent(dw))`` for a conv's custom_jvp, symbolic zeros skipped
    (an input that is not differentiated, such as the images, costs no conv of zeros)."""
    out = None
    if type(dx) is not SymbolicZero:
        out = input_tangent(dx)
    if type(dw) is not SymbolicZero:
        t = weight_tangent(dw)
        out = t if out is None else out + t
    return y, (jax.numpy.zeros_like(y) if out is None else out)


def transpose_of(linear_fn, y, v):
    """``linear_fn``'s transpose applied to ``v``, ``linear_fn`` taking arrays shaped like ``y``: as a
    tangent map, reverse mode (which transposes it back) runs ``linear_fn`` itself."""
    (t,) = jax.linear_transpose(linear_fn, jax.ShapeDtypeStruct(y.shape, y.dtype))(v)
    return t


def conv_with_grads(*, input_grad: Callable | None = None, weight_grad: Callable | None = None) -> Callable:
    """A conv with XLA's forward whose reverse mode runs the given gradients (XLA's rule for the other).

    ``input_grad(g, x, w, stride, pads, dilation)`` and
    ``weight_grad(x, g, w_shape, stride, pads, dilation)`` compute the
    gradients; the ``custom_jvp``'s tangent maps are the linear maps those
    functions transpose, so reverse mode (which transposes the tangent map)
    runs them, and forward mode gets the same maps with their sums in
    another order.
    """

    @partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
    def conv(x, w, stride, pads, dilation):
        return plain(x, w, stride, list(pads), dilation)

    def conv_jvp(stride, pads, dilation, primals, tangents):
        (x, w), (dx, dw) = primals, tangents
        y = plain(x, w, stride, list(pads), dilation)
        if input_grad is None:
            input_tangent = lambda t: plain(t, w, stride, list(pads), dilation)  # noqa: E731
        else:
            input_tangent = lambda t: transpose_of(  # noqa: E731
                lambda g: input_grad(g, x, w, stride, pads, dilation), y, t)
        if weight_grad is None:
            weight_tangent = lambda t: plain(x, t, stride, list(pads), dilation)  # noqa: E731
        else:
            weight_tangent = lambda t: transpose_of(  # noqa: E731
                lambda g: weight_grad(x, g, w.shape, stride, pads, dilation), y, t)
        return bilinear_jvp(y, dx, dw, input_tangent, weight_tangent)

    conv.defjvp(conv_jvp, symbolic_zeros=True)
    return conv
