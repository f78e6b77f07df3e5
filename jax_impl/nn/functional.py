"""torch.nn.functional on NCHW jax arrays: conv, pool, linear, pad here; norm, attention, embedding, activations, dropout, losses re-exported.

Every function takes torch's argument names and defaults and reproduces its
output shapes, padding rules and divisors (``torch/nn/functional.py``,
``aten/src/ATen/native/ConvUtils.h``, ``Pool.h``; checked against torch 2.13 CPU). Inputs may be batched ``(N, C, *S)`` or
unbatched ``(C, *S)``, as in torch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl import amp
from jax_impl.nn import _gemm, _precision
from jax_impl.nn import _max_pool as _max_pool_impl
from jax_impl.nn import _pool_indices
from jax_impl.nn._fast_conv import conv2d_core, conv_transpose2d_core
from jax_impl.nn._functional_activation import (  # noqa: F401  (re-exported: torch.nn.functional names)
    celu,
    elu,
    gelu,
    glu,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softplus,
    softmin,
    softshrink,
    softsign,
    tanh,
    tanhshrink,
    threshold,
)
from jax_impl.nn._functional_dropout import dropout, dropout1d, dropout2d, dropout3d  # noqa: F401
from jax_impl.nn._functional_loss import (  # noqa: F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    log_softmax,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
    softmax,
)
from jax_impl.nn._functional_margin_loss import (  # noqa: F401
    cosine_embedding_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    soft_margin_loss,
)
from jax_impl.nn._functional_ctc_loss import ctc_loss  # noqa: F401
from jax_impl.nn._functional_gaussian_nll_loss import gaussian_nll_loss  # noqa: F401
from jax_impl.nn._functional_poisson_nll_loss import poisson_nll_loss  # noqa: F401
from jax_impl.nn._functional_linear_cross_entropy import linear_cross_entropy  # noqa: F401
from jax_impl.nn._functional_norm import batch_norm  # noqa: F401
from jax_impl.nn._functional_normalization import group_norm, layer_norm, normalize, rms_norm  # noqa: F401
from jax_impl.nn._functional_sparse import embedding  # noqa: F401
from jax_impl.nn._functional_instancenorm import instance_norm  # noqa: F401
from jax_impl.nn._functional_pixelshuffle import pixel_shuffle, pixel_unshuffle  # noqa: F401
from jax_impl.nn._functional_interpolate import (  # noqa: F401
    interpolate,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from jax_impl.nn._functional_attention import (  # noqa: F401
    multi_head_attention_forward,
    scaled_dot_product_attention,
)
from jax_impl.nn._functional_bilinear import bilinear  # noqa: F401
from jax_impl.nn._functional_fractional_max_pool import (  # noqa: F401
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
)
# These two call this module's pools and pad at run time (a circular import, resolved by then).
from jax_impl.nn._functional_local_response_norm import local_response_norm  # noqa: F401
from jax_impl.nn._functional_lppool import lp_pool1d, lp_pool2d, lp_pool3d  # noqa: F401
from jax_impl.nn._functional_max_unpool import max_unpool1d, max_unpool2d, max_unpool3d  # noqa: F401

from jax_impl.nn._arguments import ntuple as _ntuple
from jax_impl.nn._arguments import pool_args as _pool_args
from jax_impl.nn._arguments import pool_output_size as _pool_output_size

_DIMENSION_NUMBERS = {
    1: ("NCH", "OIH", "NCH"),
    2: ("NCHW", "OIHW", "NCHW"),
    3: ("NCDHW", "OIDHW", "NCDHW"),
}


def _batched(x, nd: int, fn: str):
    """Add a batch axis to unbatched input, as torch accepts ``(C, *S)``."""
    if x.ndim == nd + 2:
        return x, False
    if x.ndim == nd + 1:
        return x[None], True
    raise ValueError(f"{fn}: expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input, got {x.ndim}D")


def _add_bias(y, bias, nd: int):
    if bias is None:
        return y
    return y + jnp.reshape(bias, (1, -1) + (1,) * nd)


def _conv_inputs(op, input, weight, bias):
    """The arrays of a convolution or ``linear`` as torch's autocast hands them to its kernel (``jax_impl.amp``)."""
    bias = None if bias is None else jnp.asarray(bias)
    return amp.cast_inputs(op, jnp.asarray(input), jnp.asarray(weight), bias)


# ----------------------------------------------------------------------------- conv


def _conv(nd, input, weight, bias, stride, padding, dilation, groups):
    input, weight, bias = _conv_inputs(f"conv{nd}d", input, weight, bias)
    x, unbatched = _batched(input, nd, f"conv{nd}d")
    stride = _ntuple(stride, nd, "stride")
    dilation = _ntuple(dilation, nd, "dilation")
    kernel = weight.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                # torch/nn/functional.py conv docs; aten Convolution.cpp
                raise ValueError("padding='same' is not supported for strided convolutions")
            # torch puts the odd element of an even total on the high side
            # (torch/nn/modules/conv.py, _ConvNd.__init__).
            totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
            pads = [(t // 2, t - t // 2) for t in totals]
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    else:
        pads = [(p, p) for p in _ntuple(padding, nd, "padding")]
    if x.shape[1] != weight.shape[1] * groups:
        raise ValueError(
            f"Given groups={groups}, weight of size {tuple(weight.shape)}, expected input"
            f"{tuple(x.shape)} to have {weight.shape[1] * groups} channels, but got {x.shape[1]} channels instead"
        )
    conv = functools.partial(
        lax.conv_general_dilated, window_strides=stride, padding=pads, rhs_dilation=dilation,
        dimension_numbers=_DIMENSION_NUMBERS[nd], feature_group_count=groups,
        precision=_precision.conv(jnp.result_type(x, weight)))
    if _gemm.one_rounding(x, weight):
        y = _gemm.bf16_product(functools.partial(conv, preferred_element_type=jnp.float32), conv,
                                rounded_off_cpu=True)(x, weight)
        y = _gemm.bias_rounded(y, bias, nd, x.dtype)
    elif nd == 2 and groups == 1 and x.dtype == weight.dtype:
        # XLA:CPU-aware lowering (jax_impl/nn/_fast_conv.py): same sums, routed around XLA's slow cases.
        y = _add_bias(conv2d_core(x, weight, stride, pads, dilation), bias, nd)
    else:
        y = conv(x, weight)
        y = _add_bias(y, bias, nd)
    return y[0] if unbatched else y


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv1d``: weight ``(out, in/groups, k)``."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv2d``: weight ``(out, in/groups, kH, kW)``."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv3d``: weight ``(out, in/groups, kD, kH, kW)``."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    input, weight, bias = _conv_inputs(f"conv_transpose{nd}d", input, weight, bias)
    x, unbatched = _batched(input, nd, f"conv_transpose{nd}d")
    stride = _ntuple(stride, nd, "stride")
    padding = _ntuple(padding, nd, "padding")
    output_padding = _ntuple(output_padding, nd, "output_padding")
    dilation = _ntuple(dilation, nd, "dilation")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise ValueError("output padding must be smaller than either stride or dilation")
    c_in, c_out_g, *kernel = weight.shape
    out_sizes = [
        (n - 1) * s - 2 * p + d * (k - 1) + 1 + op
        for n, s, p, d, k, op in zip(x.shape[2:], stride, padding, dilation, kernel, output_padding)
    ]
    if min(out_sizes) < 1:
        # aten's message; 1-D convs run as 2-D with a unit height, hence the leading "1 x".
        lead = [1] if nd == 1 else []
        shown_in = " x ".join(map(str, lead + list(x.shape[2:])))
        shown_out = " x ".join(map(str, lead + out_sizes))
        raise ValueError(
            f"Given input size per channel: ({shown_in}). "
            f"Calculated output size per channel: ({shown_out}). Output size is too small"
        )
    # torch weight (in, out/g, *K) -> forward OIHW (out, in/g, *K), spatially flipped:
    # the transpose conv is the forward conv on the stride-dilated input.
    w = weight.reshape(groups, c_in // groups, c_out_g, *kernel).swapaxes(1, 2)
    w = w.reshape(groups * c_out_g, c_in // groups, *kernel)
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    # Negative pads crop, which is how torch's padding shrinks the output.
    pads = [
        (d * (k - 1) - p, d * (k - 1) - p + op)
        for k, p, op, d in zip(kernel, padding, output_padding, dilation)
    ]
    if nd == 2 and groups == 1 and x.dtype == weight.dtype and not _gemm.one_rounding(x, weight):
        # oneDNN's backward-data kernel where it applies (jax_impl/nn/_fast_conv.py): no products by zeros.
        y = conv_transpose2d_core(x, weight, stride, padding, output_padding, dilation)
        if y is not None:
            y = _add_bias(y, bias, nd)
            return y[0] if unbatched else y
    conv = functools.partial(
        lax.conv_general_dilated, window_strides=(1,) * nd, padding=pads, lhs_dilation=stride,
        rhs_dilation=dilation, dimension_numbers=_DIMENSION_NUMBERS[nd], feature_group_count=groups,
        precision=_precision.conv(jnp.result_type(x, w)))
    if _gemm.one_rounding(x, w):
        y = _gemm.bf16_product(functools.partial(conv, preferred_element_type=jnp.float32), conv,
                                rounded_off_cpu=True)(x, w)
        y = _gemm.bias_rounded(y, bias, nd, x.dtype)
    else:
        y = _add_bias(conv(x, w), bias, nd)
    return y[0] if unbatched else y


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose1d``: weight ``(in, out/groups, k)``."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose2d``: weight ``(in, out/groups, kH, kW)``."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose3d``: weight ``(in, out/groups, kD, kH, kW)``."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


def linear(input, weight, bias=None):
    """``torch.nn.functional.linear``: ``input @ weight.T + bias``, weight ``(out, in)``.

    Under :func:`jax_impl.amp.autocast` it computes in bf16 (torch's ``lower_precision_fp`` list); in bf16
    it sums in float32 and rounds once, as torch's CPU bf16 GEMM does (``jax_impl/nn/_gemm.py``).
    """
    return _gemm.linear(*_conv_inputs("linear", input, weight, bias))


# ----------------------------------------------------------------------------- pooling


def _crop_unused_tail(x, pads):
    """Drop trailing elements no window reaches (a negative high pad).

    jax's reduce_window VJP rejects negative padding, so crop the input instead.
    """
    for axis, (lo, hi) in enumerate(pads):
        if hi < 0:
            x = lax.slice_in_dim(x, 0, x.shape[axis] + hi, axis=axis)
    return x, [(lo, max(hi, 0)) for lo, hi in pads]


def _max_pool(nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, fn):
    x, unbatched = _batched(jnp.asarray(input), nd, fn)
    kernel, stride, padding, dilation = _pool_args(nd, x, kernel_size, stride, padding, dilation, fn)
    out = [_pool_output_size(n, k, s, p, d, ceil_mode)
           for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)]
    if return_indices:
        tables = [_pool_indices.pool_tables(n, o, k, s, p, d)
                  for n, o, k, s, p, d in zip(x.shape[2:], out, kernel, stride, padding, dilation)]
        y, idx = _pool_indices.window_max_with_indices(x, tables, x.shape[2:])
        return (y[0], idx[0]) if unbatched else (y, idx)
    pads = [(0, 0), (0, 0)]
    for length, o, k, s, p, d in zip(x.shape[2:], out, kernel, stride, padding, dilation):
        # High pad extended (or cropped) so exactly `out` windows exist.
        pads.append((p, (o - 1) * s + d * (k - 1) + 1 - length - p))
    x, pads = _crop_unused_tail(x, pads)
    # Elementwise maxima of strided views with torch's gradient routing (see _max_pool):
    # XLA:CPU's reduce_window gradient is an index-carrying reduce-window plus a scatter.
    y = _max_pool_impl.window_max(x, tuple(kernel), tuple(stride), tuple(tuple(p) for p in pads[2:]),
                                  tuple(dilation), tuple(out))
    return y[0] if unbatched else y


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool1d`` (padding is -inf).

    With ``return_indices=True`` returns ``(values, indices)``, indices as torch's
    (flat positions in the input's spatial extent; see ``_pool_indices``).
    """
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool2d`` (padding is -inf; ``return_indices`` as torch)."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool2d")


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool3d`` (padding is -inf; ``return_indices`` as torch)."""
    # torch's CPU autocast runs the 3-d pools (not the 1-d and 2-d ones) in float32 (jax_impl.amp.FP32).
    input, = amp.cast_inputs("max_pool3d", jnp.asarray(input))
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool3d")


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``torch.nn.functional.max_pool1d_with_indices``: ``(values, indices)`` whatever ``return_indices``
    (the name ``F.max_pool1d(..., return_indices=True)`` dispatches to, as a traced model records it)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``torch.nn.functional.max_pool2d_with_indices``: ``(values, indices)`` (see
    :func:`max_pool1d_with_indices`)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``torch.nn.functional.max_pool3d_with_indices``: ``(values, indices)`` (see
    :func:`max_pool1d_with_indices`)."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _avg_divisor_1d(length, out, k, s, p, count_include_pad):
    """Per-output divisor along one axis (aten/src/ATen/native/cpu/AvgPoolKernel.cpp).

    ``pool_size`` counts the left/right padding but not a ceil-mode window's
    overhang past ``length + p``; without ``count_include_pad`` only input
    elements count.
    """
    start = np.arange(out) * s - p
    end = np.minimum(start + k, length + p)
    if count_include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, length) - np.maximum(start, 0)).astype(np.float64)


def _avg_pool(nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, fn):
    x, unbatched = _batched(jnp.asarray(input), nd, fn)
    kernel, stride, padding, _ = _pool_args(nd, x, kernel_size, stride, padding, 1, fn)
    if divisor_override is not None and divisor_override == 0:
        raise ValueError("divisor must be not zero")
    if nd == 3 and any(n < k for n, k in zip(x.shape[2:], kernel)):
        # aten AveragePool3d.cpp runs pool3d_shape_check with check_input_size=true (padding not counted).
        (t, h, w), (kt, kh, kw) = x.shape[2:], kernel
        raise ValueError(
            f"input image (T: {t} H: {h} W: {w}) smaller than kernel size (kT: {kt} kH: {kh} kW: {kw})"
        )
    pads = [(0, 0), (0, 0)]
    divisor = np.ones((), np.float64)
    for length, k, s, p in zip(x.shape[2:], kernel, stride, padding):
        out = _pool_output_size(length, k, s, p, 1, ceil_mode)
        pads.append((p, (out - 1) * s + k - length - p))
        div_axis = _avg_divisor_1d(length, out, k, s, p, count_include_pad)
        divisor = np.multiply.outer(divisor, div_axis)
    x, pads = _crop_unused_tail(x, pads)
    summed = lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, 1) + kernel, (1, 1) + stride, pads)
    if divisor_override is not None:
        y = summed / divisor_override
    else:
        y = summed / jnp.asarray(divisor, x.dtype)
    return y[0] if unbatched else y


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """``torch.nn.functional.avg_pool1d`` (torch's has no ``divisor_override``)."""
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, "avg_pool1d")


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """``torch.nn.functional.avg_pool2d``."""
    return _avg_pool(
        2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "avg_pool2d"
    )


def avg_pool3d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """``torch.nn.functional.avg_pool3d``."""
    input, = amp.cast_inputs("avg_pool3d", jnp.asarray(input))
    return _avg_pool(
        3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "avg_pool3d"
    )


def _adaptive_bins(length, out):
    """aten AdaptivePooling.h: bin i is [floor(i*L/O), ceil((i+1)*L/O))."""
    return [((i * length) // out, -((-(i + 1) * length) // out)) for i in range(out)]


def _adaptive_output_size(nd, x, output_size):
    sizes = output_size if isinstance(output_size, Sequence) else (output_size,) * nd
    if len(sizes) == 1:
        sizes = tuple(sizes) * nd
    # torch: None keeps that dimension's input size.
    return [length if o is None else int(o) for length, o in zip(x.shape[2:], sizes)]


def _adaptive_pool(nd, input, output_size, reduce, fn):
    x, unbatched = _batched(jnp.asarray(input), nd, fn)
    # Both mean and max over a box factor into one reduction per axis.
    for axis, out in enumerate(_adaptive_output_size(nd, x, output_size), start=2):
        slices = [
            reduce(lax.slice_in_dim(x, lo, hi, axis=axis), axis=axis, keepdims=True)
            for lo, hi in _adaptive_bins(x.shape[axis], out)
        ]
        x = jnp.concatenate(slices, axis=axis)
    return x[0] if unbatched else x


def adaptive_avg_pool1d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool1d``."""
    return _adaptive_pool(1, input, output_size, jnp.mean, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool2d``."""
    return _adaptive_pool(2, input, output_size, jnp.mean, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool3d``."""
    input, = amp.cast_inputs("adaptive_avg_pool3d", jnp.asarray(input))
    return _adaptive_pool(3, input, output_size, jnp.mean, "adaptive_avg_pool3d")


def _adaptive_max_pool(nd, input, output_size, return_indices, fn):
    if not return_indices:
        return _adaptive_pool(nd, input, output_size, jnp.max, fn)
    x, unbatched = _batched(jnp.asarray(input), nd, fn)
    sizes = _adaptive_output_size(nd, x, output_size)
    tables = [_pool_indices.adaptive_tables(n, o, _adaptive_bins(n, o)) for n, o in zip(x.shape[2:], sizes)]
    y, idx = _pool_indices.window_max_with_indices(x, tables, x.shape[2:])
    return (y[0], idx[0]) if unbatched else (y, idx)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool1d``."""
    return _adaptive_max_pool(1, input, output_size, return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool2d``."""
    return _adaptive_max_pool(2, input, output_size, return_indices, "adaptive_max_pool2d")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool3d``."""
    input, = amp.cast_inputs("adaptive_max_pool3d", jnp.asarray(input))
    return _adaptive_max_pool(3, input, output_size, return_indices, "adaptive_max_pool3d")


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool1d_with_indices``: ``(values, indices)`` whatever
    ``return_indices``."""
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool2d_with_indices``: ``(values, indices)``."""
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool3d_with_indices``: ``(values, indices)``."""
    return adaptive_max_pool3d(input, output_size, True)


# ----------------------------------------------------------------------------- pad

_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(input, pad, mode="constant", value=None):
    """``torch.nn.functional.pad``.

    ``pad`` lists ``(left, right)`` pairs starting from the **last** dimension,
    as torch does. Constant mode accepts negative pads (cropping) like torch.
    """
    x = jnp.asarray(input)
    if len(pad) % 2 != 0:
        raise ValueError("Padding length must be divisible by 2")
    n = len(pad) // 2
    if n > x.ndim:
        raise ValueError("Padding length should be less than or equal to two times the input dimension")
    widths = [(0, 0)] * (x.ndim - n) + [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in reversed(range(n))]
    if mode == "constant":
        fill = jnp.array(0 if value is None else value, x.dtype)
        return lax.pad(x, fill, [(lo, hi, 0) for lo, hi in widths])
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unsupported padding mode: {mode}")
    if value not in (None, 0):
        raise ValueError(f'Padding mode "{mode}" doesn\'t take in value argument')
    for (lo, hi), size in zip(widths[x.ndim - n:], x.shape[x.ndim - n:]):
        if mode == "reflect" and (lo >= size or hi >= size):
            raise ValueError("Padding size should be less than the corresponding input dimension")
        if mode == "circular" and (lo > size or hi > size):
            raise ValueError("Padding value causes wrapping around more than once.")
        if lo < 0 or hi < 0:
            raise NotImplementedError(f"negative padding is only supported in constant mode here, got {pad}")
    if mode != "circular":
        # aten's reflection_pad1d/2d and replication_pad1d/2d/3d are on torch's autocast fp32 list
        # (reflection_pad3d is not): the same values, in float32.
        kernel = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{n}d"
        x, = amp.cast_inputs(kernel, x)
    return jnp.pad(x, widths, mode=_PAD_MODES[mode])

