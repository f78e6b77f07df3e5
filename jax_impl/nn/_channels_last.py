"""Eval-mode ResNet blocks computed channels-last (NHWC) on XLA:CPU.

XLA:CPU runs every 2-D convolution in Eigen's NHWC layout. For an NCHW model
it transposes each conv's input into NHWC and its result back, and the
elementwise ops between convs (BatchNorm, ReLU, the residual sum, the max
pool) read one layout and write the other. A block whose arrays are NHWC
throughout has none of these copies: its convs read and write in place and
its elementwise ops run over contiguous channels. A float32 conv of at
least 2**22 multiply-adds that is not a strided 1x1
(``_fast_conv.takes_onednn_channels_last``) runs oneDNN's channels-last
kernel, which reads and writes the NHWC arrays in place; its sums may differ
from the blocked kernel's (torch's) in the last bits. That includes the
convs with few output pixels per channel that the NCHW model leaves to the
GEMM forward, where oneDNN's NHWC kernel measured faster than Eigen's. The
others run Eigen's NHWC convolution (XLA canonicalises an NCHW conv to
exactly this one). BatchNorm is torch's eval formula per channel; ReLU and
the max pool are the NCHW ones.

Measured on XLA:CPU, ResNet-18 inference is faster this way at batch 4 and
224x224 and at batch 32 and 64x64. Blocks whose convs take the im2col + GEMM
route (``takes_gemm``: ResNet-18's last stage at both sizes) stay NCHW: that
route reads the OIHW weight in place, and channels-last GEMMs measured
slower.

Used only in eval mode (BatchNorm with running statistics; training was
slower channels-last, see the README), on the CPU backend, and while
:func:`channels_last_eval` has not turned it off. Gradients through it stay
the NCHW model's: a conv's tangent is ``jax_impl.nn.functional.conv2d``'s,
between transposes (a ``custom_jvp``), so its routed derivatives apply.
``parity.models.compare_models`` turns it off, since it records every
submodule's output, which the NHWC block does not produce.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.nn import functional as F
from jax_impl.nn._arguments import ntuple, pool_args, pool_output_size
from jax_impl.nn._fast_conv import (ConvGeometry, conv2d_core, takes_direct, takes_gemm,
                                    takes_onednn_channels_last)
from jax_impl.nn._functional_activation import relu
from jax_impl.nn._functional_norm import affine, eval_invstd

__all__ = ["channels_last_eval", "channels_last_eval_enabled"]

_HIGHEST = lax.Precision.HIGHEST
_ENABLED = [True]


@contextlib.contextmanager
def channels_last_eval(enabled: bool = True) -> Iterator[None]:
    """Turn the channels-last eval path of ``jax_impl.models``' ResNets on or off inside a ``with`` block.

    Read when a model is called (traced), so a function jitted inside the
    block keeps the choice it was traced with.
    """
    previous = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    try:
        yield
    finally:
        _ENABLED[0] = previous


def channels_last_eval_enabled() -> bool:
    """Whether eval-mode ResNet blocks may run channels-last (see :func:`channels_last_eval`)."""
    return _ENABLED[0]


def to_nhwc(x):
    return jnp.transpose(x, (0, 2, 3, 1))


def to_nchw(z):
    return jnp.transpose(z, (0, 3, 1, 2))


def _pads(conv) -> tuple[tuple[int, int], tuple[int, int]] | None:
    if isinstance(conv.padding, str):
        return None
    ph, pw = ntuple(conv.padding, 2, "padding")
    return (ph, ph), (pw, pw)


def conv_shape(conv, x_shape, dtype) -> tuple[int, ...] | None:
    """The NCHW output shape of ``conv`` on ``x_shape`` if it can run channels-last, else ``None``.

    Channels-last: an ungrouped, zero-padded 2-D conv with integer padding and
    weights of the input's ``dtype``, whose NCHW route is Eigen's convolution (not the im2col + GEMM route nor
    the fused loop of ``_fast_conv``).
    """
    pads = _pads(conv)
    w = conv.weight[...]
    if (pads is None or conv.groups != 1 or conv.padding_mode != "zeros" or w.ndim != 4 or w.dtype != dtype
            or len(x_shape) != 4 or x_shape[1] != w.shape[1] or x_shape[0] == 0):
        return None
    stride, dilation = ntuple(conv.stride, 2, "stride"), ntuple(conv.dilation, 2, "dilation")
    geometry = ConvGeometry.of(x_shape, w.shape, stride, pads, dilation)
    if min(geometry.out_size) < 1 or takes_gemm(geometry) or takes_direct(geometry):
        return None
    return (x_shape[0], w.shape[0], *geometry.out_size)


def batch_norm_ok(bn) -> bool:
    """An eval-mode BatchNorm that normalises with its running statistics."""
    return not bn.training and bn.running_mean is not None and bn.running_var is not None


def usable(x) -> bool:
    """The switch is on, the backend is XLA:CPU and ``x`` is a batched floating NCHW array."""
    return (_ENABLED[0] and jax.default_backend() == "cpu" and getattr(x, "ndim", 0) == 4
            and jnp.issubdtype(x.dtype, jnp.floating))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _conv_nhwc(z, w, stride, pads, dilation):
    n, h, width, c = z.shape
    geometry = ConvGeometry.of((n, c, h, width), w.shape, stride, pads, dilation, jnp.result_type(z, w))
    if takes_onednn_channels_last(geometry):
        from jax_impl.nn import _conv_onednn  # imports jax's AD internals: only when the route is taken

        return _conv_onednn.conv2d_nhwc(z, w, stride, pads, dilation)
    return lax.conv_general_dilated(z, jnp.transpose(w, (2, 3, 1, 0)), stride, list(pads), rhs_dilation=dilation,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=_HIGHEST)


@_conv_nhwc.defjvp
def _conv_nhwc_jvp(stride, pads, dilation, primals, tangents):
    # The tangent (and so the reverse-mode gradients) of the NCHW route, between transposes.
    def nchw(z, w):
        return to_nhwc(conv2d_core(to_nchw(z), w, stride, pads, dilation))

    _, dy = jax.jvp(nchw, primals, tangents)
    return _conv_nhwc(*primals, stride, pads, dilation), dy


def conv2d(conv, z):
    """``conv`` (a ``Conv2d`` that :func:`conv_shape` accepts) on NHWC ``z``."""
    w = conv.weight[...]
    stride, dilation = ntuple(conv.stride, 2, "stride"), ntuple(conv.dilation, 2, "dilation")
    pads = _pads(conv)
    if w.shape[2:] == (1, 1) and pads == ((0, 0), (0, 0)):
        # A 1x1 conv is a GEMM over the channels of the strided view (jax's own derivatives).
        y = lax.dot_general(z[:, ::stride[0], ::stride[1], :], w[:, :, 0, 0], (((3,), (1,)), ((), ())),
                            precision=_HIGHEST)
    else:
        y = _conv_nhwc(z, w, stride, pads, dilation)
    b = conv._bias()
    return y if b is None else y + b


def batch_norm(bn, z):
    """torch's eval BatchNorm on NHWC ``z``: ``y = x * alpha + beta`` per trailing channel, ``alpha`` and
    ``beta`` as ``jax_impl.nn.functional.batch_norm`` forms them."""
    weight = None if bn.weight is None else bn.weight[...]
    bias = None if bn.bias is None else bn.bias[...]
    alpha, beta = affine(bn.running_mean[...], eval_invstd(bn.running_var[...], bn.eps), weight, bias)
    return z * alpha + beta


def conv_bn_relu(conv, bn, z, *, activation: bool = True):
    y = batch_norm(bn, conv2d(conv, z))
    return relu(y) if activation else y


@partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4, 5, 6))
def _window_max_nhwc(z, kernel, stride, padding, dilation, ceil_mode, out):
    # torch's max pool as jax_impl's NCHW one computes it (_max_pool._forward): -inf padding, then
    # the elementwise maxima (NaN-propagating) of the windows' strided views in row-major order.
    pads = [(0, 0, 0)]
    for length, o, k, s, p, d in zip(z.shape[1:3], out, kernel, stride, padding, dilation):
        pads.append((p, (o - 1) * s + d * (k - 1) + 1 - length - p, 0))  # a negative high pad crops
    zp = lax.pad(z, np.array(-np.inf, z.dtype), pads + [(0, 0, 0)])
    y = None
    for offset in np.ndindex(*kernel):
        start = (0, offset[0] * dilation[0], offset[1] * dilation[1], 0)
        limit = (z.shape[0], start[1] + (out[0] - 1) * stride[0] + 1, start[2] + (out[1] - 1) * stride[1] + 1,
                 z.shape[3])
        v = lax.slice(zp, start, limit, (1, *stride, 1))
        y = v if y is None else lax.max(y, v)
    return y


@_window_max_nhwc.defjvp
def _window_max_nhwc_jvp(kernel, stride, padding, dilation, ceil_mode, out, primals, tangents):
    # torch's gradient routing is the NCHW pool's (jax_impl/nn/_max_pool.py), between transposes.
    def nchw(z):
        return to_nhwc(F.max_pool2d(to_nchw(z), kernel, stride, padding, dilation, ceil_mode))

    _, dy = jax.jvp(nchw, primals, tangents)
    return _window_max_nhwc(*primals, kernel, stride, padding, dilation, ceil_mode, out), dy


def _pool_geometry(pool, spatial):
    """``(kernel, stride, padding, dilation, out)`` of ``pool`` over ``spatial`` (H, W), as the NCHW function
    checks and computes them (torch's errors for bad arguments)."""
    kernel, stride, padding, dilation = pool_args(2, None, pool.kernel_size, pool.stride, pool.padding,
                                                     pool.dilation, "max_pool2d")
    out = tuple(pool_output_size(n, k, s, p, d, pool.ceil_mode)
                for n, k, s, p, d in zip(spatial, kernel, stride, padding, dilation))
    return tuple(kernel), tuple(stride), tuple(padding), tuple(dilation), out


def pool_ok(pool, x_shape) -> bool:
    """A ``MaxPool2d`` without ``return_indices`` whose arguments torch accepts for NCHW ``x_shape``."""
    if pool.return_indices or len(x_shape) != 4:
        return False
    try:
        _pool_geometry(pool, x_shape[2:])
    except (ValueError, TypeError, RuntimeError):
        return False  # the NCHW module raises torch's error
    return True


def max_pool2d(pool, z):
    """``pool`` (a ``MaxPool2d`` that :func:`pool_ok` accepts) on NHWC ``z``."""
    kernel, stride, padding, dilation, out = _pool_geometry(pool, z.shape[1:3])
    return _window_max_nhwc(z, kernel, stride, padding, dilation, pool.ceil_mode, out)
