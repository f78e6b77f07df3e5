"""2-D convolutions as matrix products (im2col + one GEMM, or a dot over channels), for ``_fast_conv``'s routes.

Each computes the same products as XLA's convolution; the routes that use
them and when are in :mod:`jax_impl.nn._fast_conv`.

- :func:`gemm_conv`: the im2col + GEMM route, forward by :func:`gemm_2d_t`,
  derivatives jax's rules for :func:`gemm_2d` (the same bilinear map);
- :func:`gemm_forward_conv`: :func:`gemm_2d_t`'s forward with XLA's conv
  derivatives;
- :func:`pointwise_2d`: a strided 1x1 conv as a dot over the channels of the
  input's strided view, with jax's own derivatives.
"""

from __future__ import annotations

from functools import partial

import jax
from jax import lax

from jax_impl.nn import _conv_xla as xla

__all__ = ["columns", "gemm_2d", "gemm_2d_t", "gemm_conv", "gemm_forward_conv", "pointwise_2d"]


def columns(x, kernel, stride, pads, dilation, axis=2):
    """im2col: ``(A, B, kH*kW, Ho, Wo)`` for an ``(A, B, H, W)`` input (taps stacked at ``axis``), and ``(Ho, Wo)``.

    Tap ``(i, j)`` is the strided view of the padded input. With one output pixel (a DCGAN
    discriminator's last conv, 4x4 over 4x4) the taps are the pixels of the one window, in the same
    order: the window itself, reshaped, rather than ``kH*kW`` slices (each a kernel XLA compiles, as
    are their transposes in the gradient).
    """
    kh, kw = kernel
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    ho, wo = xla.out_size(x.shape, (0, x.shape[1], kh, kw), stride, pads, dilation)
    if ho == wo == 1:
        a, b = x.shape[:2]
        window = xp[:, :, :dilation[0] * (kh - 1) + 1:dilation[0], :dilation[1] * (kw - 1) + 1:dilation[1]]
        taps = window.reshape(a, b, kh * kw, 1, 1)
        return (taps if axis == 2 else jax.numpy.moveaxis(taps, 2, axis)), (ho, wo)
    cols = [
        xp[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (ho - 1) + 1:stride[0],
           j * dilation[1]:j * dilation[1] + stride[1] * (wo - 1) + 1:stride[1]]
        for i in range(kh) for j in range(kw)
    ]
    return jax.numpy.stack(cols, axis=axis), (ho, wo)


def gemm_2d(x, w, stride, pads, dilation):
    """im2col then one GEMM: y[n, o, p] = sum_k patches[n, k, p] * w[o, k], k = (c, i, j) in torch's weight order."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    cols, (ho, wo) = columns(x, (kh, kw), stride, pads, dilation)
    patches = cols.reshape(n, c * kh * kw, ho * wo)
    y = lax.dot_general(patches, w.reshape(o, c * kh * kw), (((1,), (1,)), ((), ())), precision=xla.HIGHEST)
    return jax.numpy.transpose(y, (0, 2, 1)).reshape(n, o, ho, wo)


def gemm_2d_t(x, w, stride, pads, dilation):
    """W (C_out x K) @ the transposed column matrix (K x N*Ho*Wo), k = (c, i, j) in torch's weight order.

    Both operands are row-major, so the OIHW weight is read in place (in
    :func:`gemm_2d`'s orientation XLA hands the weight to the GEMM as a
    transposed operand). The columns are cut from the input transposed to
    ``(C, N, H, W)`` and stacked as ``(C, kH*kW, N, Ho, Wo)``, already the
    matrix's order: cutting them from the NCHW input and transposing the
    stack costs XLA one more pass over the columns. Same products and sums as
    :func:`gemm_2d`, bit for bit. Measured on XLA:CPU on ResNet-18's
    GEMM-routed convs, this forward is faster than :func:`gemm_2d`'s and its
    reverse mode slower, so the routes differentiate other maps.
    """
    n, c = x.shape[:2]
    o = w.shape[0]
    cols, (ho, wo) = columns(x.transpose(1, 0, 2, 3), w.shape[2:], stride, pads, dilation, axis=1)
    cols = cols.reshape(c * w.shape[2] * w.shape[3], n * ho * wo)
    y = lax.dot_general(w.reshape(o, -1), cols, (((1,), (0,)), ((), ())), precision=xla.HIGHEST)  # (O, N*Ho*Wo)
    return y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)


def _gemm_t_forward(tangent_conv, doc: str):
    """A conv whose forward is :func:`gemm_2d_t` and whose tangent maps are ``tangent_conv``'s
    (the same bilinear map): a ``custom_jvp``, so reverse mode runs ``tangent_conv``'s transposes."""

    @partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
    def conv(x, w, stride, pads, dilation):
        return gemm_2d_t(x, w, stride, pads, dilation)

    def conv_jvp(stride, pads, dilation, primals, tangents):
        (x, w), (dx, dw) = primals, tangents
        return xla.bilinear_jvp(gemm_2d_t(x, w, stride, pads, dilation), dx, dw,
                                lambda t: tangent_conv(t, w, stride, pads, dilation),
                                lambda t: tangent_conv(x, t, stride, pads, dilation))

    conv.defjvp(conv_jvp, symbolic_zeros=True)
    conv.__doc__ = doc
    return conv


# The tangent convs are looked up when called (``gemm_2d``, ``xla.plain``), so a test can replace them.
gemm_conv = _gemm_t_forward(
    lambda x, w, stride, pads, dilation: gemm_2d(x, w, stride, pads, dilation),
    "im2col + GEMM: forward by :func:`gemm_2d_t`, derivatives those of :func:`gemm_2d` (the same bilinear map).")
gemm_forward_conv = _gemm_t_forward(
    lambda x, w, stride, pads, dilation: xla.plain(x, w, stride, list(pads), dilation),
    ":func:`gemm_2d_t`'s forward; derivatives XLA's conv rules (the same bilinear map).")


def pointwise_2d(x, w, stride, pads):
    """``y[n, o, h, w] = sum_c xs[n, c, h, w] * w[o, c]``, ``xs`` the padded input's strided view."""
    if any(p for pp in pads for p in pp):
        x = lax.pad(x, jax.numpy.zeros((), x.dtype), ((0, 0, 0), (0, 0, 0)) + tuple((lo, hi, 0) for lo, hi in pads))
    x = lax.slice(x, (0, 0, 0, 0), x.shape, (1, 1) + tuple(stride))
    y = lax.dot_general(x, w.reshape(w.shape[:2]), (((1,), (1,)), ((), ())), precision=xla.HIGHEST)  # (N, H, W, O)
    return y.transpose(0, 3, 1, 2)
