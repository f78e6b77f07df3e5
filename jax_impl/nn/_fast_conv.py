"""Drop-in ``conv1d/2d/3d`` whose 2-D weight gradient avoids XLA:CPU's slow YNNPACK path.

Root cause (jax/jaxlib 0.10.2, XLA:CPU): since the YNNPACK integration, the
CPU compiler hands every 2-D ``convolution`` HLO whose input or output feature
count exceeds 16 to a ``__ynn_fusion`` (``xla/backends/cpu/ynn_support.cc``,
``IsConvolutionOpSupportedByYnn``; on by default through
``--xla_cpu_experimental_ynn_fusion_type``). The weight gradient of a conv is a
convolution whose *feature* dimension is the batch (N=256 for LeNet) and whose
*window* is the whole output image (28x28); YNNPACK runs that shape 7-20x
slower than XLA's Eigen convolution (LeNet conv1: ~170 ms vs ~9 ms).

Without touching global flags (a library cannot set ``XLA_FLAGS`` once JAX is
initialised), the weight gradient is written here as convolutions that
YNNPACK declines (see ``_weight_grad_2d``): for C_out <= 16 the batch is cut
into chunks of 16 (feature counts <= 16 stay in Eigen) and the partial
gradients summed; otherwise a base (lhs) dilation of 2 along H, compensated by
doubling the window stride, the kernel dilation and the padding along H (the
dilated zeros meet no kept output, so the products are the same; Eigen runs
it ~2-3x slower than the plain form, still well ahead of YNNPACK). The forward and the input gradient
stay the plain ``lax.conv_general_dilated`` ops of ``jax_impl.nn.functional``
(measured: the same trick made those slower), except that a forward with very
few multiply-adds per output pixel (LeNet conv1) is written as one fused
shifted-multiply-add loop, ~3x faster than Eigen's thin GEMM. 1-D and 3-D convs and grouped
convs are never taken by YNNPACK, so they use the plain ops unchanged.

A conv whose output image is no larger than its kernel (ResNet-18's last
stage at 64x64 input: 3x3 convs on 2x2 images) is written as im2col and one
GEMM (``lax.dot_general``), its gradients by jax's rules for those ops: XLA's
Eigen convolution takes 400+ ms for a 32x512x2x2 3x3 conv that the GEMM does
in ~6 ms (torch: 7 ms), and its strided backward at 4x4 takes 115 ms vs 6 ms.
So is a conv whose batch has no more output pixels than it has output
channels (ResNet-18's last stage at 224x224 and batch 4: 4*7*7 <= 512): its
column matrix is then no larger than its weight, and the GEMM reads the OIHW
weight in place, where XLA's convolution copies it into Eigen's HWIO layout
(and, for the gradients, copies it again and copies the weight gradient
back), which in a whole step costs more than the column matrix. Up to four
times as many output pixels as output channels (the third stage at 224x224,
batch 4) only the forward is the GEMM (``_gemm_forward_conv``): there XLA's
conv derivatives are the faster ones. A strided 1x1 conv (ResNet's
downsamples) is a dot over the channels of the input's strided view, with
jax's own derivatives (``_pointwise_2d``).

Three derivative rewrites keep XLA's forward and change only what reverse mode
runs, through a ``custom_jvp`` whose tangent is the transpose of the wanted
map (so forward mode still works): the input gradient of a stride-1 conv
with few input channels (LeNet conv2) packs the kernel's column taps into
the channels of a kH x 1 conv (``_packed_input_grad``), the fused loop's
weight gradient is summed over batch chunks of 16 (``_weight_grad_2d``), and
the weight gradient of a strided conv over a batch of at most 4 splits the
input into its stride phases, a stride-1 weight gradient (``_phase_weight_grad``),
and the weight gradient of a stride-1 conv over a batch under 16 moves spatial
blocks of the output gradient (and of the input, with a halo) into the batch
(``_block_weight_grad``).

If the process was started with YNNPACK convolutions off
(``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_convolution``,
the better fix: Eigen on the plain weight-gradient conv is ~2-3x faster than
on the dilated one), or on a non-CPU backend, jax's own rule is used.
"""

from __future__ import annotations

import math
import os
import re
from functools import partial

import jax
from jax import lax
from jax.custom_derivatives import SymbolicZero

from jax_impl.nn._materialize import computed_once

_HIGHEST = lax.Precision.HIGHEST
_NCHW = ("NCHW", "OIHW", "NCHW")

__all__ = ["conv2d_core"]

# YNNPACK takes a 2-D conv when max(input features, output features) > 16
# (ynn_support.cc); for the weight-gradient conv those are N and C_out.
_YNN_FEATURE_THRESHOLD = 16
_CHUNK = 16  # batch chunk of the chunked weight gradient (a feature count YNNPACK leaves to Eigen)
_MAX_CHUNKS = 32


def _ynn_takes_convs(xla_flags: str | None = None) -> bool:
    """False when XLA_FLAGS turns YNNPACK convolutions off, e.g.
    ``--xla_cpu_experimental_ynn_fusion_type=`` (all YNNPACK fusions off) or
    ``=-individual_convolution`` (only convolutions off). Then XLA runs jax's
    own weight-gradient conv in Eigen, which is faster than the workaround.
    A list without +/- signs replaces the default set."""
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
_YNN_CONVS = _ynn_takes_convs()


def _plain(x, w, stride, pads, dilation):
    """XLA's own convolution, exactly as ``jax_impl.nn.functional`` writes every other conv."""
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=pads, rhs_dilation=dilation, dimension_numbers=_NCHW, precision=_HIGHEST,
    )


def _weight_grad_2d(x, g, kernel, stride, pads, dilation):
    """dW[o,c,i,j] = sum_{n,h,w} g[n,o,h,w] * xpad[n,c,s0*h+d0*i,s1*w+d1*j] (groups == 1).

    A conv with C as batch, N as contracted feature and g as the window,
    dilated by the forward stride, kept away from YNNPACK in one of two ways:

    - C_out <= 16 and N <= 512: the batch is cut into chunks of 16 (both
      feature counts <= 16, so Eigen runs each chunk) and the partial weight
      gradients are summed (LeNet conv1: 150 ms in YNNPACK -> 7 ms);
    - otherwise a base dilation of 2 on H, with the stride, window dilation
      and padding on H doubled: the inserted zeros meet no kept output, so the
      products are the same, and YNNPACK rejects base-dilated convs.
    """
    out_sp = g.shape[2:]
    in_sp = x.shape[2:]
    # High padding that makes the output exactly `kernel` long (may be negative: a crop).
    his = [dilation[a] * (kernel[a] - 1) + stride[a] * (out_sp[a] - 1) + 1 - in_sp[a] - pads[a][0] for a in range(2)]
    n, n_out = x.shape[0], g.shape[1]
    if n_out <= _YNN_FEATURE_THRESHOLD and n <= _CHUNK * _MAX_CHUNKS:
        acc = None
        for n0 in range(0, n, _CHUNK):
            d = lax.conv_general_dilated(
                x[n0:n0 + _CHUNK], g[n0:n0 + _CHUNK], window_strides=dilation,
                padding=[(pads[a][0], his[a]) for a in range(2)], rhs_dilation=stride,
                dimension_numbers=("CNHW", "IOHW", "CNHW"), precision=_HIGHEST,
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
        rhs_dilation=tuple(rdil), dimension_numbers=("CNHW", "IOHW", "CNHW"), precision=_HIGHEST,
    )


# Forward as one fused multiply-add loop over the kernel taps when the conv is
# tiny per output pixel (LeNet conv1: 3*5*5 taps x 6 outputs): XLA's Eigen conv
# runs such thin GEMMs ~3x slower (measured 41 -> 14 ms at 256x3x32x32).
# LeNet conv2 (6*5*5 taps x 16) is already faster in Eigen (4 vs 11 ms).
_DIRECT_MAX_TAPS = 128
_DIRECT_MAX_MACS = 1024  # taps * C_out per output pixel
# ... and only for convs big enough for the loop to pay (LeNet conv1 at batch 256: 9e7 multiply-adds).
# Below this XLA's conv costs about the same, and keeping XLA's own op keeps its summation order
# (measured: the fused loop on the 8x8 digits' first conv moved lenet_digits_adamw_warmup_cosine,
# a config at its float32 precision floor, from 8.3e-5 to 1.0e-4 after 270 steps).
_DIRECT_MIN_WORK = 1 << 24


def _use_direct(w, x_shape=None, out_size=None):
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    if jax.default_backend() != "cpu" or taps > _DIRECT_MAX_TAPS or taps * w.shape[0] > _DIRECT_MAX_MACS:
        return False
    if x_shape is None:
        return True
    return x_shape[0] * out_size[0] * out_size[1] * taps * w.shape[0] >= _DIRECT_MIN_WORK


# Independent partial sums in the fused loop: one running sum of all 75 taps is a chain of
# dependent multiply-adds per output, which bounds the loop by FMA latency (LeNet conv1,
# 256x3x32x32: 9.6 ms with one sum, 6.2/6.1/5.9/5.5/8.3 ms with 2/3/4/5/8 sums).
_DIRECT_PARTIAL_SUMS = 5


def _direct_2d(x, w, stride, pads, dilation):
    """sum over (c, i, j) of w[:, c, i, j] * shifted x: XLA fuses it into one loop.

    The taps are summed in ``min(kw, 5)`` partial sums, tap ``(c, i, j)`` into
    partial sum ``j % n`` in (c, i, j) order, and the partial sums are added
    in order at the end.

    With stride 1 (LeNet conv1) the loop runs over rows of the padded input's
    full width: each image plane is flattened, tap ``(i, j)`` is the flat
    slice starting at ``i*d0*Wp + j*d1``, and the result is ``(N, O, Ho, Wp)``
    whose last ``Wp - Wo`` columns (reads that wrap into the next row) the
    caller drops (:func:`_direct_once`). The loop's innermost dimension is
    then ``Ho*Wp`` long instead of ``Wo`` (LeNet conv1: 896 instead of 28,
    which XLA:CPU vectorises without remainders), for the same products
    summed in the same order.
    """
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    kh, kw = w.shape[2:]
    out = [(xp.shape[2 + a] - dilation[a] * (k - 1) - 1) // stride[a] + 1 for a, k in enumerate((kh, kw))]
    n_partial = min(kw, _DIRECT_PARTIAL_SUMS)
    partial = [None] * n_partial
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
                partial[k] = t if partial[k] is None else partial[k] + t
    acc = partial[0]
    for p in partial[1:]:
        acc = acc + p
    return acc.reshape(n, w.shape[0], out[0], wp) if flat else acc


def _out_size(x_shape, w_shape, stride, pads, dilation) -> tuple[int, int]:
    return tuple((x_shape[2 + a] + pads[a][0] + pads[a][1] - dilation[a] * (w_shape[2 + a] - 1) - 1) // stride[a] + 1
                 for a in range(2))


def _use_gemm(x_shape, w_shape, stride, pads, dilation) -> bool:
    """im2col + GEMM on CPU when either

    - the output image is no larger than the kernel: XLA's convolution is
      pathologically slow there; or
    - the batch has no more output pixels than the conv has output channels
      (``N*Ho*Wo <= C_out``), i.e. the column matrix (``N*Ho*Wo x C*kH*kW``)
      is no larger than the weight (``C_out x C*kH*kW``): XLA's convolution
      first copies the OIHW weight into Eigen's HWIO layout (for the input
      gradient a second time, and the weight gradient back), while the GEMM
      reads the weight in place as a ``C_out x C*kH*kW`` matrix. Those
      copies cost ResNet-18 at 224x224, batch 4, ~19% of its inference
      (weights passed pre-transposed: 121.3 -> 98.5 ms); this route, which
      takes its last stage: inference 115.6 -> 93.6 ms, train step 403 ->
      380 ms.
    """
    if jax.default_backend() != "cpu":
        return False
    taps = w_shape[2] * w_shape[3]
    ho, wo = _out_size(x_shape, w_shape, stride, pads, dilation)
    if taps > 1 and ho * wo <= taps:
        return True
    return 0 < x_shape[0] * ho * wo <= w_shape[0]


def _columns(x, kernel, stride, pads, dilation, axis=2):
    """im2col: ``(A, B, kH*kW, Ho, Wo)`` for an ``(A, B, H, W)`` input (taps stacked at ``axis``), and ``(Ho, Wo)``.

    Tap ``(i, j)`` is the strided view of the padded input.
    """
    kh, kw = kernel
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    ho, wo = _out_size(x.shape, (0, x.shape[1], kh, kw), stride, pads, dilation)
    cols = [
        xp[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (ho - 1) + 1:stride[0],
           j * dilation[1]:j * dilation[1] + stride[1] * (wo - 1) + 1:stride[1]]
        for i in range(kh) for j in range(kw)
    ]
    return jax.numpy.stack(cols, axis=axis), (ho, wo)


def _gemm_2d(x, w, stride, pads, dilation):
    """im2col then one GEMM: y[n, o, p] = sum_k patches[n, k, p] * w[o, k], k = (c, i, j) in torch's weight order."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    cols, (ho, wo) = _columns(x, (kh, kw), stride, pads, dilation)
    patches = cols.reshape(n, c * kh * kw, ho * wo)
    y = lax.dot_general(patches, w.reshape(o, c * kh * kw), (((1,), (1,)), ((), ())), precision=_HIGHEST)
    return jax.numpy.transpose(y, (0, 2, 1)).reshape(n, o, ho, wo)


# The GEMM route's forward as W (C_out x K) @ columns (K x N*Ho*Wo), both operands row-major: the
# OIHW weight is read in place and YNNPACK's GEMM takes it as is (in _gemm_2d's orientation XLA
# hands YNNPACK the weight as a transposed operand). Forward alone, AVX-512 host of 2026-11-25:
# 32x512x2x2 3x3 4.5 -> 3.8 ms, 4x512x7x7 7.0 -> 6.6 ms, 32x256x4x4 3x3/2 2.5 -> 2.2 ms. Its
# reverse mode was slower in this orientation (forward+backward 11.0 -> 12.7 ms), so the
# derivatives stay _gemm_2d's (a custom_jvp whose tangent is _gemm_2d's). ResNet-18 at 64x64,
# batch 32, inference (in-process A/B, medians of 25): 65.9 -> 63.6 and 72.8 -> 68.4 ms; train
# step and the 224x224 case unchanged within the noise.
_GEMM_T_FWD = True


def _gemm_2d_t(x, w, stride, pads, dilation):
    """W (C_out x K) @ the transposed column matrix (K x N*Ho*Wo), k = (c, i, j) in torch's weight order.

    The columns are cut from the input transposed to ``(C, N, H, W)`` and stacked
    as ``(C, kH*kW, N, Ho, Wo)``, already the matrix's order: cutting them from
    the NCHW input and transposing the ``(N, C, kH*kW, Ho, Wo)`` stack cost XLA
    one more pass over the columns (same products, same sums; AMD EPYC host
    of 2026-11-25, conv alone: 4x512x7x7 3x3 8.8 -> 7.3 ms, its strided 4x256x14x14
    4.8 -> 3.3 ms, 32x512x2x2 6.0 -> 5.1 ms, bit-identical).
    """
    n, c = x.shape[:2]
    o = w.shape[0]
    cols, (ho, wo) = _columns(x.transpose(1, 0, 2, 3), w.shape[2:], stride, pads, dilation, axis=1)
    cols = cols.reshape(c * w.shape[2] * w.shape[3], n * ho * wo)
    y = lax.dot_general(w.reshape(o, -1), cols, (((1,), (0,)), ((), ())), precision=_HIGHEST)  # (O, N*Ho*Wo)
    return y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _gemm_conv(x, w, stride, pads, dilation):
    """im2col + GEMM: forward by ``_gemm_2d_t``, derivatives those of ``_gemm_2d`` (the same bilinear map)."""
    return _gemm_2d_t(x, w, stride, pads, dilation)


def _gemm_conv_jvp(stride, pads, dilation, primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    return _bilinear_jvp(_gemm_2d_t(x, w, stride, pads, dilation), dx, dw,
                         lambda t: _gemm_2d(t, w, stride, pads, dilation),
                         lambda t: _gemm_2d(x, t, stride, pads, dilation))


_gemm_conv.defjvp(_gemm_conv_jvp, symbolic_zeros=True)


def _bilinear_jvp(y, dx, dw, input_tangent, weight_tangent):
    """``(y, input_tangent(dx) + weight_tangent(dw))`` for a conv's custom_jvp, symbolic zeros skipped
    (an input that is not differentiated, such as the images, costs no conv of zeros)."""
    out = None
    if type(dx) is not SymbolicZero:
        out = input_tangent(dx)
    if type(dw) is not SymbolicZero:
        t = weight_tangent(dw)
        out = t if out is None else out + t
    return y, (jax.numpy.zeros_like(y) if out is None else out)


def _transpose_of(linear_fn, y, v):
    """``linear_fn``'s transpose applied to ``v``, ``linear_fn`` taking arrays shaped like ``y``: as a
    tangent map, reverse mode (which transposes it back) runs ``linear_fn`` itself."""
    (t,) = jax.linear_transpose(linear_fn, jax.ShapeDtypeStruct(y.shape, y.dtype))(v)
    return t


def _xla_conv_with_grads(*, input_grad=None, weight_grad=None):
    """A conv with XLA's forward whose reverse mode takes ``input_grad(g, x, w, stride, pads, dilation)``
    and/or ``weight_grad(x, g, w_shape, stride, pads, dilation)`` (XLA's rule for the other): a
    ``custom_jvp`` whose tangent maps are the linear maps those functions transpose, so reverse mode
    (which transposes the tangent map) runs them and forward mode gets the same maps, its sums in
    another order."""

    @partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
    def conv(x, w, stride, pads, dilation):
        return _plain(x, w, stride, list(pads), dilation)

    def conv_jvp(stride, pads, dilation, primals, tangents):
        (x, w), (dx, dw) = primals, tangents
        y = _plain(x, w, stride, list(pads), dilation)
        if input_grad is None:
            input_tangent = lambda t: _plain(t, w, stride, list(pads), dilation)  # noqa: E731
        else:
            input_tangent = lambda t: _transpose_of(  # noqa: E731
                lambda g: input_grad(g, x, w, stride, pads, dilation), y, t)
        if weight_grad is None:
            weight_tangent = lambda t: _plain(x, t, stride, list(pads), dilation)  # noqa: E731
        else:
            weight_tangent = lambda t: _transpose_of(  # noqa: E731
                lambda g: weight_grad(x, g, w.shape, stride, pads, dilation), y, t)
        return _bilinear_jvp(y, dx, dw, input_tangent, weight_tangent)

    conv.defjvp(conv_jvp, symbolic_zeros=True)
    return conv


def _direct_once(x, w, stride, pads, dilation):
    """The fused loop, computed once (``computed_once``): as a plain fusion XLA:CPU inlined all
    its taps into every consumer (ReLU, the max pool and their gradients: 4 extra evaluations of
    LeNet conv1 per train step, ~60 ms)."""
    y = computed_once(lambda a, b: _direct_2d(a, b, stride, pads, dilation), w, x, w)
    wo = _out_size(x.shape, w.shape, stride, pads, dilation)[1]
    return y[..., :wo] if y.shape[-1] != wo else y


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _direct_conv(x, w, stride, pads, dilation):
    """The fused loop forward; its derivatives are those of XLA's own conv (the same bilinear map)."""
    return _direct_once(x, w, stride, pads, dilation)


def _direct_conv_jvp(stride, pads, dilation, primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    y = _direct_once(x, w, stride, pads, dilation)
    if _chunks_weight_grad(x.shape, w.shape):
        weight_tangent = lambda t: _chunked_weight_tangent(x, t, y, stride, pads, dilation)  # noqa: E731
    else:
        weight_tangent = lambda t: _plain(x, t, stride, list(pads), dilation)  # noqa: E731
    return _bilinear_jvp(y, dx, dw, lambda t: _plain(t, w, stride, list(pads), dilation), weight_tangent)


# The fused loop's weight gradient, batch cut into chunks of 16 (``_weight_grad_2d``'s chunked
# form) even with YNNPACK convs off: Eigen runs LeNet conv1's (256x3x32x32 -> 6x28x28) in 4.1-4.3
# ms that way against 5.5-6.8 ms in one conv (chunks of 4/8/32: 4.3-4.6/4.1-4.6/5.7 ms; torch 2.4-2.9
# ms); LeNet train step 26.9 -> 25.6 and 28.6 -> 26.9 ms (two in-process A/B runs).
_CHUNKED_DW = True


def _chunks_weight_grad(x_shape, w_shape) -> bool:
    return _CHUNKED_DW and w_shape[0] <= _YNN_FEATURE_THRESHOLD and _CHUNK < x_shape[0] <= _CHUNK * _MAX_CHUNKS


def _chunked_weight_tangent(x, dw, y, stride, pads, dilation):
    """conv(x, dw): the linear map whose transpose (reverse mode) is ``_weight_grad_2d``'s chunked sum."""
    return _transpose_of(lambda g: _weight_grad_2d(x, g, dw.shape[2:], stride, pads, dilation), y, dw)


_direct_conv.defjvp(_direct_conv_jvp, symbolic_zeros=True)


# The input gradient of a stride-1 conv with few input channels (LeNet conv2: 6) is a conv with
# that few *output* channels, a GEMM Eigen runs at ~1/4 of torch's speed (256x16x10x10 -> 6x14x14:
# 10-11.7 ms, torch 2.7 ms). Packed: the kW column taps become output channels of a (kH x 1) conv
# on the explicitly padded gradient (C_in*kW = 30 channels, 6.0 ms), then kW shifted slices summed
# (XLA fuses that sum into the consumer, reading Eigen's NHWC result in place). LeNet train step
# 32.6 -> 28.5 ms (in-process A/B, AVX2 host of 2026-11-25).
_PACKED_DX_MAX_CHANNELS = 64  # C_in * kW
_PACKED_DX_MIN_WORK = 1 << 24  # multiply-adds of the input gradient (below: XLA's order kept)
_PACKED_DX = True


def _use_packed_dx(x_shape, w_shape, stride, dilation, out_size):
    c_out, c_in, kh, kw = w_shape
    # Not with YNNPACK convs on: the weight gradient would be jax's rule, which YNNPACK takes.
    return (_PACKED_DX and not _YNN_CONVS and jax.default_backend() == "cpu" and x_shape[0] > 0
            and stride == (1, 1) and dilation == (1, 1)
            and kw > 1 and c_in < _YNN_FEATURE_THRESHOLD and c_in * kw <= _PACKED_DX_MAX_CHANNELS
            and x_shape[0] * out_size[0] * out_size[1] * c_out * c_in * kh * kw >= _PACKED_DX_MIN_WORK)


def _packed_input_grad(g, w, x_shape, pads):
    """dX = conv(pad(g), flip(w)^T), stride and dilation 1, with the kW taps packed as channels.

    ``part[n, (b, c), i, j'] = sum_{o, a} gp[n, o, i + a, j'] * w[o, c, kH-1-a, kW-1-b]`` (a kH x 1
    conv), then ``dX[n, c, i, j] = sum_b part[n, (b, c), i, j + b]``.
    """
    n, c_in, h, wd = x_shape
    c_out, _, kh, kw = w.shape
    (plh, phh), (plw, phw) = pads
    lo_h, lo_w = kh - 1 - plh, kw - 1 - plw
    gp = lax.pad(g, jax.numpy.zeros((), g.dtype), ((0, 0, 0), (0, 0, 0),
                 (lo_h, h + kh - 1 - g.shape[2] - lo_h, 0), (lo_w, wd + kw - 1 - g.shape[3] - lo_w, 0)))
    wf = jax.numpy.flip(w, (2, 3))  # [o, c, a, b]
    wk = wf.transpose(3, 1, 0, 2).reshape(kw * c_in, c_out, kh, 1)  # [(b, c), o, a, 1]
    part = _plain(gp, wk, (1, 1), [(0, 0), (0, 0)], (1, 1))  # (N, kW*C_in, H, W + kW - 1)
    part = part.reshape(n, kw, c_in, h, wd + kw - 1)
    out = part[:, 0, :, :, :wd]
    for b in range(1, kw):
        out = out + part[:, b, :, :, b:b + wd]
    return out


_packed_dx_conv = _xla_conv_with_grads(
    input_grad=lambda g, x, w, stride, pads, dilation: _packed_input_grad(g, w, x.shape, pads))


# The weight gradient of a strided conv over a small batch (ResNet-18's 7x7/2 stem at 224x224,
# batch 4): jax's rule is a convolution whose feature dimension is the batch and whose window is
# the output gradient dilated by the stride, which Eigen runs slowly with so few features (stem,
# 4x3x224x224: 21-41 ms; torch 5.8 ms). Split into the stride's phases (x[..., S*h+a, S*w+b] as
# S*S extra channels), it is a stride-1 weight gradient with an undilated window and a
# ceil(k/S)-wide kernel: the same products, summed by Eigen in the same order (bit-identical
# here), in 14-22 ms. With 8 images or more the split loses (stem at 8x3x224x224: 23.7 -> 25.7
# ms; 32x3x64x64: 6.3 -> 8.3 ms), so it is taken for batches of at most 4; and only for outputs
# of at least 28x28 with a kernel wider than 1 (ResNet-18 at 224, batch 4, weight gradient alone:
# layer 2's 3x3/2 conv 6.7 -> 5.3 ms, but layer 3's, on a 14x14 output, 4.1 -> 5.1 ms and the 1x1/2
# downsamples 1.4 -> 1.7 and 0.9 -> 1.5 ms). ResNet-18 224 train step, medians of 25 in-process
# A/B runs on the AVX-512 host of 2026-11-25: 422.9 -> 409.5, 384.5 -> 378.3, 457.4 -> 431.2 ms.
_PHASE_DW_MAX_BATCH = 4
_PHASE_DW_MIN_PIXELS = 28 * 28
_PHASE_DW = True


def _use_phase_dw(x_shape, w_shape, stride, dilation, out_size) -> bool:
    return (_PHASE_DW and not _YNN_CONVS and jax.default_backend() == "cpu"
            and 0 < x_shape[0] <= _PHASE_DW_MAX_BATCH and max(stride) > 1 and dilation == (1, 1)
            and min(w_shape[2:]) > 1 and out_size[0] * out_size[1] >= _PHASE_DW_MIN_PIXELS)


def _phase_weight_grad(x, g, kernel, stride, pads):
    """dW[o, c, S0*p+a, S1*q+b] = sum_{n,h,w} g[n, o, h, w] * xph[n, (c, a, b), h+p, w+q], cropped to ``kernel``.

    ``xph[n, (c, a, b), h', w'] = xpad[n, c, S0*h'+a, S1*w'+b]``: the padded input split into its
    stride phases (zero beyond the image), so the sum is a stride-1 weight-gradient conv.
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
                                 precision=_HIGHEST)  # (O, C*S0*S1, kp0, kp1)
    d = d.reshape(o, c, stride[0], stride[1], kp[0], kp[1]).transpose(0, 1, 4, 2, 5, 3)
    return d.reshape(o, c, kp[0] * stride[0], kp[1] * stride[1])[:, :, :kernel[0], :kernel[1]]


_phase_dw_conv = _xla_conv_with_grads(
    weight_grad=lambda x, g, w_shape, stride, pads, dilation: _phase_weight_grad(x, g, w_shape[2:], stride, pads))


# The weight gradient of a stride-1 conv over a small batch is a convolution whose feature
# dimension is the batch; Eigen runs it far slower than torch (4x64x56x56 3x3: 11.5 vs 5.0 ms).
# Cutting the output gradient into b x b spatial blocks (and the padded input into the matching
# blocks with a kH-1 / kW-1 halo) makes the batch N*b*b: the same products, summed over the
# blocks by the convolution. Blocks chosen so that N*b*b >= 16 (AMD EPYC host of 2026-11-25,
# alone: 4x64x56x56 11.5 -> 6.7 ms with 2x2 blocks, 7.1 with 4x4, 7.5 with 8x8; 4x128x28x28
# 8.1 -> 5.2 ms; torch 5.0 and 4.8 ms). Taken on outputs of at least 28x28 (ResNet-18 at 224x224,
# batch 4: its first and second stages): train step 404.0 -> 392.5 and 390.9 -> 369.7 ms in two
# in-process A/B runs (medians of 15 and 25), inference unchanged.
_BLOCK_DW_FEATURES = 16
_BLOCK_DW_MIN_PIXELS = 28 * 28
_BLOCK_DW = True


def _block_dw_split(x_shape, w_shape, stride, dilation, out_size) -> int:
    """Blocks per spatial axis of the block-split weight gradient (0: not taken)."""
    n = x_shape[0]
    if (not _BLOCK_DW or jax.default_backend() != "cpu" or _YNN_CONVS or tuple(stride) != (1, 1)
            or tuple(dilation) != (1, 1) or w_shape[2] * w_shape[3] == 1 or not 0 < n < _BLOCK_DW_FEATURES
            or out_size[0] * out_size[1] < _BLOCK_DW_MIN_PIXELS):
        return 0
    b = math.ceil(math.sqrt(_BLOCK_DW_FEATURES / n))
    return b if out_size[0] % b == 0 and out_size[1] % b == 0 else 0


def _block_weight_grad(x, g, kernel, pads, blocks):
    """The stride-1 weight gradient ``sum over (n, h, w) of g[n, o, h, w] * xpad[n, c, h+i, w+j]``,
    as a VALID conv's weight gradient over ``blocks x blocks`` spatial blocks moved into the batch."""
    n, c = x.shape[:2]
    o, (ho, wo), (kh, kw) = g.shape[1], g.shape[2:], kernel
    th, tw = ho // blocks, wo // blocks
    xp = jax.numpy.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    xb = jax.numpy.stack([xp[:, :, a * th:a * th + th + kh - 1, b * tw:b * tw + tw + kw - 1]
                          for a in range(blocks) for b in range(blocks)], axis=1)
    xb = xb.reshape(n * blocks * blocks, c, th + kh - 1, tw + kw - 1)
    gb = g.reshape(n, o, blocks, th, blocks, tw).transpose(0, 2, 4, 1, 3, 5).reshape(n * blocks * blocks, o, th, tw)
    w_like = jax.ShapeDtypeStruct((o, c, kh, kw), g.dtype)
    (dw,) = jax.linear_transpose(lambda v: _plain(xb, v, (1, 1), [(0, 0), (0, 0)], (1, 1)), w_like)(gb)
    return dw


_block_dw_conv = _xla_conv_with_grads(
    weight_grad=lambda x, g, w_shape, stride, pads, dilation: _block_weight_grad(
        x, g, w_shape[2:], pads, _block_dw_split(x.shape, w_shape, stride, dilation, g.shape[2:])))


# The GEMM forward pays up to N*Ho*Wo = 4*C_out (ResNet-18's third stage at 224x224, batch 4:
# 4*14*14 = 784 <= 4*256), but its derivatives (_gemm_2d's) cost more than XLA's there, so this
# route keeps XLA's conv derivatives. ResNet-18 at 224x224, batch 4 (in-process A/B, AMD EPYC host
# of 2026-11-25, medians of 20): inference 117.4 -> 105.8 ms (a second run, minima: 105.3 -> 94.9),
# train step 412.3 -> 408.7 ms; at 64x64, batch 32 (its third stage also takes it): 71.6 / 72.5 ms
# inference, 260.3 / 252.9 ms train step, within the noise. 16*C_out (the second stage at 64x64 as
# well) measured slower: 77.7 ms inference.
_GEMM_FWD_PIXELS_PER_CHANNEL = 4


def _use_gemm_forward(x_shape, w_shape, out_size) -> bool:
    """GEMM forward with XLA's conv derivatives: ``N*Ho*Wo <= 4*C_out`` on CPU, with YNNPACK convs off.

    (With YNNPACK convs on, XLA's weight-gradient conv would go to YNNPACK:
    ``_ynn_free_conv`` takes those convs.)
    """
    pixels = x_shape[0] * out_size[0] * out_size[1]
    return (jax.default_backend() == "cpu" and not _YNN_CONVS
            and 0 < pixels <= _GEMM_FWD_PIXELS_PER_CHANNEL * w_shape[0])


@partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _gemm_forward_conv(x, w, stride, pads, dilation):
    """``_gemm_2d_t``'s forward; derivatives XLA's conv rules (the same bilinear map)."""
    return _gemm_2d_t(x, w, stride, pads, dilation)


def _gemm_forward_conv_jvp(stride, pads, dilation, primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    return _bilinear_jvp(_gemm_2d_t(x, w, stride, pads, dilation), dx, dw,
                         lambda t: _plain(t, w, stride, list(pads), dilation),
                         lambda t: _plain(x, t, stride, list(pads), dilation))


_gemm_forward_conv.defjvp(_gemm_forward_conv_jvp, symbolic_zeros=True)


# A strided 1x1 conv is a GEMM over the channels of the input's strided view: XLA's convolution
# pays for Eigen's NHWC layout (input and output transposed, the OIHW weight copied to HWIO) where
# a dot_general reads NCHW in place, and jax's derivatives of the dot and the strided slice (an
# interior-padded input gradient) need no convolution either. ResNet-18's downsamples, forward /
# forward+backward alone, AMD EPYC host of 2026-11-25 (torch in brackets): 32x64x16x16 -> 128
# 0.99 / 1.64 -> 0.55 / 0.87 ms (0.39 / 4.67), 4x64x56x56 -> 128 1.85 / 2.96 -> 0.69 / 1.44 ms
# (0.50 / 2.31), 4x128x28x28 -> 256 0.92 / 2.11 -> 0.64 / 1.06 ms (0.44 / 1.79), 4x256x14x14 ->
# 512 0.88 / 1.55 -> 0.71 / 1.31 ms (0.43 / 1.67). Stride 1 (ResNet-50's 1x1 convs) stays XLA's:
# there the forward gained (4x256x56x56 -> 64: 7.81 -> 5.49 ms) but forward+backward did not
# (4x64x56x56 -> 256: 11.96 -> 13.35 ms with XLA's derivatives; XLA shares the input's NHWC copy
# between the forward and the weight-gradient conv).
_POINTWISE = True


def _use_pointwise(x_shape, w_shape, stride) -> bool:
    """A strided 1x1 kernel on CPU (dilation has no effect on one tap)."""
    return (_POINTWISE and jax.default_backend() == "cpu" and tuple(w_shape[2:]) == (1, 1)
            and max(stride) > 1 and x_shape[0] > 0)


def _pointwise_2d(x, w, stride, pads):
    """``y[n, o, h, w] = sum_c xs[n, c, h, w] * w[o, c]``, ``xs`` the padded input's strided view."""
    if any(p for pp in pads for p in pp):
        x = lax.pad(x, jax.numpy.zeros((), x.dtype), ((0, 0, 0), (0, 0, 0)) + tuple((lo, hi, 0) for lo, hi in pads))
    x = lax.slice(x, (0, 0, 0, 0), x.shape, (1, 1) + tuple(stride))
    y = lax.dot_general(x, w.reshape(w.shape[:2]), (((1,), (1,)), ((), ())), precision=_HIGHEST)  # (N, H, W, O)
    return y.transpose(0, 3, 1, 2)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _ynn_free_conv(x, w, stride, pads, dilation):
    """Plain forward; weight gradient kept away from YNNPACK (only when XLA_FLAGS left its convs on)."""
    return _plain(x, w, stride, list(pads), dilation)


def _ynn_free_conv_fwd(x, w, stride, pads, dilation):
    return _ynn_free_conv(x, w, stride, pads, dilation), (x, w)


def _ynn_free_conv_bwd(stride, pads, dilation, res, g):
    x, w = res
    pads = list(pads)
    # Input gradient: jax's own transpose rule (a conv of g with the flipped kernel).
    _, vjp_x = jax.vjp(lambda a: _plain(a, w, stride, pads, dilation), x)
    (dx,) = vjp_x(g)
    dw = _weight_grad_2d(x, g, w.shape[2:], stride, pads, dilation)
    return dx.astype(x.dtype), dw.astype(w.dtype)


_ynn_free_conv.defvjp(_ynn_free_conv_fwd, _ynn_free_conv_bwd)


def conv2d_core(x, w, stride: tuple[int, int], pads, dilation: tuple[int, int]):
    """The 2-D, ungrouped convolution of ``jax_impl.nn.functional.conv2d`` (no bias; ``pads`` as ``[(lo, hi)] * 2``).

    Routes, all computing the same sums (see the module docstring): a dot for
    strided 1x1 kernels; im2col + GEMM for outputs no larger than the kernel
    (or batches with no more output pixels than output channels); the GEMM
    forward with XLA's conv derivatives up to 4x as many pixels as output
    channels; the fused loop for tiny kernels (its derivatives are XLA's conv
    rules, forward mode included); the packed input gradient (stride 1, few
    input channels), the phase-split weight gradient (strided, batch <= 4)
    and the block-split one (stride 1, batch < 16), all ``custom_jvp``; the
    YNNPACK-free weight gradient when XLA_FLAGS left YNNPACK convs on
    (reverse mode only); XLA's convolution otherwise, and on GPU/TPU.
    """
    stride, dilation = tuple(stride), tuple(dilation)
    pads = tuple(tuple(p) for p in pads)
    if _use_pointwise(x.shape, w.shape, stride):
        return _pointwise_2d(x, w, stride, pads)  # jax's own derivatives: a dot and a strided slice
    if _use_gemm(x.shape, w.shape, stride, pads, dilation):
        return _gemm_conv(x, w, stride, pads, dilation) if _GEMM_T_FWD and x.size else _gemm_2d(x, w, stride, pads, dilation)
    out_size = _out_size(x.shape, w.shape, stride, pads, dilation)
    if _use_direct(w, x.shape, out_size) and all(p >= 0 for pp in pads for p in pp) and isinstance(x, jax.core.Tracer):
        # Traced only: run eagerly, the loop would be 75 dispatches (and compiles) instead of one op.
        return _direct_conv(x, w, stride, pads, dilation)
    if _use_packed_dx(x.shape, w.shape, stride, dilation, out_size) and isinstance(x, jax.core.Tracer):
        return _packed_dx_conv(x, w, stride, pads, dilation)
    if _use_phase_dw(x.shape, w.shape, stride, dilation, out_size) and isinstance(x, jax.core.Tracer):
        return _phase_dw_conv(x, w, stride, pads, dilation)
    if _use_gemm_forward(x.shape, w.shape, out_size):
        return _gemm_forward_conv(x, w, stride, pads, dilation)
    if _block_dw_split(x.shape, w.shape, stride, dilation, out_size) and isinstance(x, jax.core.Tracer):
        return _block_dw_conv(x, w, stride, pads, dilation)
    if _YNN_CONVS and jax.default_backend() == "cpu" and max(x.shape[0], w.shape[0]) > _YNN_FEATURE_THRESHOLD:
        return _ynn_free_conv(x, w, stride, pads, dilation)
    return _plain(x, w, stride, list(pads), dilation)
