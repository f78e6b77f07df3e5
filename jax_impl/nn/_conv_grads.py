"""2-D convolution gradients written around XLA:CPU's slow cases, for ``_fast_conv``'s routes.

Each function computes the same products as jax's own transpose rule, only
arranged as convolutions that XLA:CPU runs faster; the conditions under which
each pays are the routes' (:mod:`jax_impl.nn._fast_conv`).

- :func:`weight_grad_2d`: the weight gradient as convolutions YNNPACK
  declines (batch chunks of 16, or a base dilation), and
  :func:`ynn_free_conv`, a conv whose reverse mode uses it;
- :func:`packed_input_grad` (:data:`packed_dx_conv`): a stride-1 input
  gradient with the kernel's column taps packed into channels;
- :func:`phase_weight_grad` (:data:`phase_dw_conv`): a strided weight
  gradient split into the stride's phases;
- :func:`block_weight_grad` (:data:`block_dw_conv`): a stride-1 weight
  gradient with spatial blocks moved into the batch.
"""

from __future__ import annotations

import math
from functools import partial

import jax
from jax import lax

from jax_impl.nn import _conv_xla as xla

__all__ = [
    "BLOCK_DW_FEATURES", "CHUNK", "MAX_CHUNKS", "block_dw_conv", "block_weight_grad", "blocks_for", "packed_dx_conv",
    "packed_input_grad", "phase_dw_conv", "phase_weight_grad", "weight_grad_2d", "ynn_free_conv",
]

CHUNK = 16  # batch chunk of the chunked weight gradient (a feature count YNNPACK leaves to Eigen)
MAX_CHUNKS = 32


def weight_grad_2d(x, g, kernel, stride, pads, dilation):
    """dW[o,c,i,j] = sum_{n,h,w} g[n,o,h,w] * xpad[n,c,s0*h+d0*i,s1*w+d1*j] (groups == 1).

    A conv with C as batch, N as contracted feature and g as the window,
    dilated by the forward stride, kept away from YNNPACK (whose weight-gradient
    convs XLA:CPU runs several times slower than Eigen's) in one of two ways:

    - C_out <= 16 and N <= 512: the batch is cut into chunks of 16 (both
      feature counts <= 16, so Eigen runs each chunk) and the partial weight
      gradients are summed;
    - otherwise a base dilation of 2 on H, with the stride, window dilation
      and padding on H doubled: the inserted zeros meet no kept output, so the
      products are the same, and YNNPACK rejects base-dilated convs.
    """
    out_sp = g.shape[2:]
    in_sp = x.shape[2:]
    # High padding that makes the output exactly `kernel` long (may be negative: a crop).
    his = [dilation[a] * (kernel[a] - 1) + stride[a] * (out_sp[a] - 1) + 1 - in_sp[a] - pads[a][0] for a in range(2)]
    n, n_out = x.shape[0], g.shape[1]
    if n_out <= xla.YNN_FEATURE_THRESHOLD and n <= CHUNK * MAX_CHUNKS:
        acc = None
        for n0 in range(0, n, CHUNK):
            d = lax.conv_general_dilated(
                x[n0:n0 + CHUNK], g[n0:n0 + CHUNK], window_strides=dilation,
                padding=[(pads[a][0], his[a]) for a in range(2)], rhs_dilation=stride,
                dimension_numbers=("CNHW", "IOHW", "CNHW"), precision=xla.HIGHEST,
            )
            acc = d if acc is None else acc + d
        return acc
    new_pads, strides, rdil = [], [], []
    for ax in range(2):
        f = 2 if ax == 0 else 1
        new_pads.append((f * pads[ax][0], f * his[ax]))
        strides.append(f * dilation[ax])
        rdil.append(f * stride[ax])
    return lax.conv_general_dilated(
        x, g, window_strides=tuple(strides), padding=new_pads, lhs_dilation=(2, 1),
        rhs_dilation=tuple(rdil), dimension_numbers=("CNHW", "IOHW", "CNHW"), precision=xla.HIGHEST,
    )


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def ynn_free_conv(x, w, stride, pads, dilation):
    """Plain forward; weight gradient by :func:`weight_grad_2d`, away from YNNPACK."""
    return xla.plain(x, w, stride, list(pads), dilation)


def _ynn_free_conv_fwd(x, w, stride, pads, dilation):
    return ynn_free_conv(x, w, stride, pads, dilation), (x, w)


def _ynn_free_conv_bwd(stride, pads, dilation, res, g):
    x, w = res
    pads = list(pads)
    # Input gradient: jax's own transpose rule (a conv of g with the flipped kernel).
    _, vjp_x = jax.vjp(lambda a: xla.plain(a, w, stride, pads, dilation), x)
    (dx,) = vjp_x(g)
    dw = weight_grad_2d(x, g, w.shape[2:], stride, pads, dilation)
    return dx.astype(x.dtype), dw.astype(w.dtype)


ynn_free_conv.defvjp(_ynn_free_conv_fwd, _ynn_free_conv_bwd)


def packed_input_grad(g, w, x_shape, pads):
    """dX = conv(pad(g), flip(w)^T), stride and dilation 1, with the kW taps packed as channels.

    ``part[n, (b, c), i, j'] = sum_{o, a} gp[n, o, i + a, j'] * w[o, c, kH-1-a, kW-1-b]`` (a kH x 1
    conv on the explicitly padded gradient), then ``dX[n, c, i, j] = sum_b part[n, (b, c), i, j + b]``
    (kW shifted slices, which XLA fuses into the consumer, reading Eigen's NHWC result in place).
    With few input channels the plain input gradient is a conv with that few *output* channels, a
    GEMM Eigen runs far below its speed; packed, it has C_in * kW of them.
    """
    n, c_in, h, wd = x_shape
    c_out, _, kh, kw = w.shape
    (plh, phh), (plw, phw) = pads
    lo_h, lo_w = kh - 1 - plh, kw - 1 - plw
    gp = lax.pad(g, jax.numpy.zeros((), g.dtype), ((0, 0, 0), (0, 0, 0),
                 (lo_h, h + kh - 1 - g.shape[2] - lo_h, 0), (lo_w, wd + kw - 1 - g.shape[3] - lo_w, 0)))
    wf = jax.numpy.flip(w, (2, 3))  # [o, c, a, b]
    wk = wf.transpose(3, 1, 0, 2).reshape(kw * c_in, c_out, kh, 1)  # [(b, c), o, a, 1]
    part = xla.plain(gp, wk, (1, 1), [(0, 0), (0, 0)], (1, 1))  # (N, kW*C_in, H, W + kW - 1)
    part = part.reshape(n, kw, c_in, h, wd + kw - 1)
    out = part[:, 0, :, :, :wd]
    for b in range(1, kw):
        out = out + part[:, b, :, :, b:b + wd]
    return out


packed_dx_conv = xla.conv_with_grads(
    input_grad=lambda g, x, w, stride, pads, dilation: packed_input_grad(g, w, x.shape, pads))


def phase_weight_grad(x, g, kernel, stride, pads):
    """dW[o, c, S0*p+a, S1*q+b] = sum_{n,h,w} g[n, o, h, w] * xph[n, (c, a, b), h+p, w+q], cropped to ``kernel``.

    ``xph[n, (c, a, b), h', w'] = xpad[n, c, S0*h'+a, S1*w'+b]``: the padded input split into its
    stride phases (zero beyond the image), so the sum is a stride-1 weight-gradient conv with an
    undilated window and a ``ceil(k/S)``-wide kernel, where jax's rule dilates the window by the
    stride (which Eigen runs slowly when the batch, its feature dimension, is small). Same
    products, summed by Eigen in the same order.
    """
    n, c = x.shape[:2]
    o = g.shape[1]
    out = g.shape[2:]
    kp = [-(-kernel[a] // stride[a]) for a in range(2)]  # taps per phase
    span = [stride[a] * (out[a] + kp[a] - 1) for a in range(2)]  # padded extent, a multiple of the stride
    xp = lax.pad(x, jax.numpy.zeros((), x.dtype), ((0, 0, 0), (0, 0, 0)) + tuple(
        (pads[a][0], span[a] - x.shape[2 + a] - pads[a][0], 0) for a in range(2)))
    hq, wq = out[0] + kp[0] - 1, out[1] + kp[1] - 1
    xph = xp.reshape(n, c, hq, stride[0], wq, stride[1]).transpose(0, 1, 3, 5, 2, 4)
    xph = xph.reshape(n, c * stride[0] * stride[1], hq, wq)
    d = lax.conv_general_dilated(xph, g, (1, 1), [(0, 0), (0, 0)], dimension_numbers=("CNHW", "IOHW", "CNHW"),
                                 precision=xla.HIGHEST)  # (O, C*S0*S1, kp0, kp1)
    d = d.reshape(o, c, stride[0], stride[1], kp[0], kp[1]).transpose(0, 1, 4, 2, 5, 3)
    return d.reshape(o, c, kp[0] * stride[0], kp[1] * stride[1])[:, :, :kernel[0], :kernel[1]]


phase_dw_conv = xla.conv_with_grads(
    weight_grad=lambda x, g, w_shape, stride, pads, dilation: phase_weight_grad(x, g, w_shape[2:], stride, pads))


# The block split makes the weight gradient's batch (its feature dimension) at least this large.
BLOCK_DW_FEATURES = 16


def blocks_for(batch: int, out_size: tuple[int, int]) -> int:
    """Blocks per spatial axis that make ``batch * blocks**2 >= 16``; 0 if they do not tile the output."""
    if batch <= 0:
        return 0
    b = math.ceil(math.sqrt(BLOCK_DW_FEATURES / batch))
    return b if out_size[0] % b == 0 and out_size[1] % b == 0 else 0


def block_weight_grad(x, g, kernel, pads, blocks):
    """The stride-1 weight gradient ``sum over (n, h, w) of g[n, o, h, w] * xpad[n, c, h+i, w+j]``,
    as a VALID conv's weight gradient over ``blocks x blocks`` spatial blocks moved into the batch.

    The output gradient is cut into blocks and the padded input into the
    matching blocks with a kH-1 / kW-1 halo: the same products, summed over
    the blocks by the convolution, whose feature dimension is now
    ``N * blocks**2`` instead of a small N.
    """
    n, c = x.shape[:2]
    o, (ho, wo), (kh, kw) = g.shape[1], g.shape[2:], kernel
    th, tw = ho // blocks, wo // blocks
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    xb = jax.numpy.stack([xp[:, :, a * th:a * th + th + kh - 1, b * tw:b * tw + tw + kw - 1]
                          for a in range(blocks) for b in range(blocks)], axis=1)
    xb = xb.reshape(n * blocks * blocks, c, th + kh - 1, tw + kw - 1)
    gb = g.reshape(n, o, blocks, th, blocks, tw).transpose(0, 2, 4, 1, 3, 5).reshape(n * blocks * blocks, o, th, tw)
    w_like = jax.ShapeDtypeStruct((o, c, kh, kw), g.dtype)
    (dw,) = jax.linear_transpose(lambda v: xla.plain(xb, v, (1, 1), [(0, 0), (0, 0)], (1, 1)), w_like)(gb)
    return dw


block_dw_conv = xla.conv_with_grads(
    weight_grad=lambda x, g, w_shape, stride, pads, dilation: block_weight_grad(
        x, g, w_shape[2:], pads, blocks_for(x.shape[0], g.shape[2:])))
