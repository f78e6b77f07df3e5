"""A 2-D convolution as one fused shifted-multiply-add loop over the kernel taps, for ``_fast_conv``.

For a conv with very few multiply-adds per output pixel (LeNet's first conv:
3*5*5 taps x 6 outputs) XLA:CPU's Eigen convolution is a thin GEMM, several
times slower than one elementwise loop over the taps. The loop's derivatives
are XLA's own conv rules (the same bilinear map), the weight gradient summed
over batch chunks where that is faster (:func:`chunks_weight_grad`).
"""

from __future__ import annotations

from functools import partial

import jax

from jax_impl.nn import _conv_grads as grads
from jax_impl.nn import _conv_xla as xla
from jax_impl.nn._materialize import computed_once

__all__ = ["chunks_weight_grad", "direct_2d", "direct_conv", "direct_once"]

# Independent partial sums in the fused loop: one running sum of all the taps is a chain of
# dependent multiply-adds per output, which bounds the loop by FMA latency. Measured on XLA:CPU
# for LeNet's first conv, 5 sums ran fastest of 1 to 8.
_DIRECT_PARTIAL_SUMS = 5


def direct_2d(x, w, stride, pads, dilation):
    """sum over (c, i, j) of w[:, c, i, j] * shifted x: XLA fuses it into one loop.

    The taps are summed in ``min(kw, 5)`` partial sums, tap ``(c, i, j)`` into
    partial sum ``j % n`` in (c, i, j) order, and the partial sums are added
    in order at the end.

    With stride 1 (LeNet conv1) the loop runs over rows of the padded input's
    full width: each image plane is flattened, tap ``(i, j)`` is the flat
    slice starting at ``i*d0*Wp + j*d1``, and the result is ``(N, O, Ho, Wp)``
    whose last ``Wp - Wo`` columns (reads that wrap into the next row) the
    caller drops (:func:`direct_once`). The loop's innermost dimension is
    then ``Ho*Wp`` long instead of ``Wo`` (LeNet conv1: 896 instead of 28,
    which XLA:CPU vectorises without remainders), for the same products
    summed in the same order.
    """
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    kh, kw = w.shape[2:]
    out = [(xp.shape[2 + a] - dilation[a] * (k - 1) - 1) // stride[a] + 1 for a, k in enumerate((kh, kw))]
    n_partial = min(kw, _DIRECT_PARTIAL_SUMS)
    partial_sums = [None] * n_partial
    flat = tuple(stride) == (1, 1)
    if flat:
        n, _, hp, wp = xp.shape
        length = out[0] * wp
        xf = jax.numpy.pad(xp.reshape(n, xp.shape[1], hp * wp), ((0, 0), (0, 0), (0, dilation[1] * (kw - 1))))
    for c in range(w.shape[1]):
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilation[0], j * dilation[1]
                if flat:
                    xs = xf[:, None, c, r0 * wp + c0:r0 * wp + c0 + length]
                    t = w[None, :, c, i, j, None] * xs
                else:
                    xs = xp[:, None, c, r0:r0 + stride[0] * (out[0] - 1) + 1:stride[0], c0:c0 + stride[1] * (out[1] - 1) + 1:stride[1]]
                    t = w[None, :, c, i, j, None, None] * xs
                k = j % n_partial
                partial_sums[k] = t if partial_sums[k] is None else partial_sums[k] + t
    acc = partial_sums[0]
    for p in partial_sums[1:]:
        acc = acc + p
    return acc.reshape(n, w.shape[0], out[0], wp) if flat else acc


def direct_once(x, w, stride, pads, dilation):
    """The fused loop, computed once (``computed_once``): as a plain fusion XLA:CPU inlines all
    its taps into every consumer (ReLU, the max pool and their gradients: four extra evaluations
    of LeNet's first conv per train step)."""
    y = computed_once(lambda a, b: direct_2d(a, b, stride, pads, dilation), w, x, w)
    wo = xla.out_size(x.shape, w.shape, stride, pads, dilation)[1]
    return y[..., :wo] if y.shape[-1] != wo else y


def chunks_weight_grad(x_shape, w_shape) -> bool:
    """Whether the loop's weight gradient is summed over batch chunks of 16 (:func:`grads.weight_grad_2d`).

    Even with YNNPACK convolutions off, Eigen runs LeNet's first weight
    gradient faster in chunks of 16 than as one conv (measured on XLA:CPU;
    chunks of 4 and 8 about as fast, 32 slower).
    """
    return w_shape[0] <= xla.YNN_FEATURE_THRESHOLD and grads.CHUNK < x_shape[0] <= grads.CHUNK * grads.MAX_CHUNKS


def _chunked_weight_tangent(x, dw, y, stride, pads, dilation):
    """conv(x, dw): the linear map whose transpose (reverse mode) is ``weight_grad_2d``'s chunked sum."""
    return xla.transpose_of(lambda g: grads.weight_grad_2d(x, g, dw.shape[2:], stride, pads, dilation), y, dw)


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def direct_conv(x, w, stride, pads, dilation):
    """The fused loop forward; its derivatives are those of XLA's own conv (the same bilinear map)."""
    return direct_once(x, w, stride, pads, dilation)


def _direct_conv_jvp(stride, pads, dilation, primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    y = direct_once(x, w, stride, pads, dilation)
    if chunks_weight_grad(x.shape, w.shape):
        weight_tangent = lambda t: _chunked_weight_tangent(x, t, y, stride, pads, dilation)  # noqa: E731
    else:
        weight_tangent = lambda t: xla.plain(x, t, stride, list(pads), dilation)  # noqa: E731
    return xla.bilinear_jvp(y, dx, dw, lambda t: xla.plain(t, w, stride, list(pads), dilation), weight_tangent)


direct_conv.defjvp(_direct_conv_jvp, symbolic_zeros=True)
