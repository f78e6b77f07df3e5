"""The 2-D convolution of ``jax_impl.nn.functional``: a table of routes around XLA:CPU's slow cases.

Every route computes the same sums as XLA's own convolution (forward, input
gradient and weight gradient), arranged as operations XLA:CPU runs faster
for some shapes. :data:`ROUTES` lists them in priority order, each a
predicate on the conv's shapes (:class:`ConvGeometry`) and an
implementation; :func:`conv2d_core` takes the first route whose predicate
holds. The implementations live beside this table:

- :mod:`jax_impl.nn._conv_xla`: XLA's convolution and the ``custom_jvp``
  plumbing the other routes share;
- :mod:`jax_impl.nn._conv_gemm`: im2col + one GEMM, and strided 1x1 convs as
  a dot;
- :mod:`jax_impl.nn._conv_direct`: one fused multiply-add loop over the
  kernel taps;
- :mod:`jax_impl.nn._conv_grads`: input and weight gradients rearranged
  (packed taps, stride phases, spatial blocks, batch chunks).

Why routes at all: XLA:CPU's convolutions are Eigen's (or YNNPACK's, for 2-D
convs with more than 16 features, ``xla/backends/cpu/ynn_support.cc``), and
several shapes of a LeNet or ResNet train step fall on their slow paths: thin
GEMMs (few taps or few channels), weight gradients whose feature dimension is
a small batch, tiny output images, and the copies between the OIHW weight and
Eigen's HWIO layout. Each predicate's thresholds are where the route measured
faster on XLA:CPU; a route is removed by deleting its row. On GPU/TPU every
predicate is false and XLA's convolution runs.

YNNPACK's weight-gradient convolutions are several times slower than Eigen's
(``jax_impl/_xla_cpu.py`` switches them off at import). If a process keeps
them on (its own ``XLA_FLAGS``), the routes that would hand XLA a
weight-gradient conv YNNPACK takes stand aside and the last special route
keeps the weight gradient away from YNNPACK (:func:`~jax_impl.nn._conv_grads.weight_grad_2d`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

from jax_impl.backends import mkldnn
from jax_impl.nn import _conv_direct as direct
from jax_impl.nn import _conv_gemm as gemm
from jax_impl.nn import _conv_grads as grads
from jax_impl.nn import _conv_xla as xla

__all__ = [
    "ROUTES", "ConvGeometry", "Route", "conv2d_core", "conv_transpose2d_core", "route_for", "takes_block_dw",
    "takes_direct", "takes_gemm", "takes_gemm_forward", "takes_onednn", "takes_onednn_channels_last",
    "takes_onednn_transpose", "takes_packed_dx", "takes_phase_dw", "takes_pointwise", "takes_ynn_free",
    "transpose_geometry",
]


class ConvGeometry(NamedTuple):
    """What a route is chosen by: NCHW input, OIHW weight, ``pads`` as ``((lo, hi), (lo, hi))``, the dtype."""

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: tuple[int, int]
    pads: tuple[tuple[int, int], tuple[int, int]]
    dilation: tuple[int, int]
    out_size: tuple[int, int]
    dtype: str = "float32"

    @classmethod
    def of(cls, x_shape, w_shape, stride, pads, dilation, dtype="float32") -> ConvGeometry:
        stride, dilation = tuple(stride), tuple(dilation)
        pads = tuple(tuple(p) for p in pads)
        return cls(tuple(x_shape), tuple(w_shape), stride, pads, dilation,
                   xla.out_size(x_shape, w_shape, stride, pads, dilation), str(jax.numpy.dtype(dtype)))

    @property
    def macs(self) -> int:
        """Multiply-adds of the forward: ``N * Ho * Wo * C_out * C_in * kH * kW``."""
        return self.pixels * self.w_shape[0] * self.w_shape[1] * self.w_shape[2] * self.w_shape[3]

    @property
    def pixels(self) -> int:
        """Output pixels of the whole batch, ``N * Ho * Wo``."""
        return self.x_shape[0] * self.out_size[0] * self.out_size[1]


def _cpu() -> bool:
    return jax.default_backend() == "cpu"


# ----------------------------------------------------------------------------- predicates


# Below this many multiply-adds a conv costs less than the custom call's fixed price (its Python handler and
# oneDNN's reorders, tens of microseconds), and XLA's own conv keeps its summation order (the 8x8 digits'
# convs stay XLA's).
_ONEDNN_MIN_MACS = 1 << 22


# A conv with few output pixels per channel goes to oneDNN (cut by channels) from this output image size
# (ResNet-18 at 224x224: 14x14 and 7x7; at 64x64: 4x4, and the DCGAN discriminator's 4x4); on 2x2 images
# the GEMM routes measured faster (ResNet-18's last stage at 64x64: 2.7 against 4.5 ms forward and backward).
_ONEDNN_FEW_PIXELS_MIN_IMAGE = 4 * 4


def takes_onednn(g: ConvGeometry) -> bool:
    """oneDNN's convolution (:mod:`~jax_impl.nn._conv_onednn`), torch's own CPU kernel, forward and both
    gradients: float32 on the CPU backend with oneDNN installed and ``jax_impl.backends.mkldnn`` enabled,
    a non-empty batch and output, and at least ``2**22`` multiply-adds. oneDNN's JIT kernels run the
    shapes XLA:CPU is slow on (thin GEMMs, batch-as-feature weight gradients) at torch's speed, with no
    NCHW/NHWC transposes around them.

    Left to the routes below: strided 1x1 kernels (:func:`takes_pointwise`), convs whose output is
    smaller than the kernel, and convs whose batch has few output pixels against their output channels
    (:func:`takes_gemm`, :func:`takes_gemm_forward`: ResNet's last stages) unless oneDNN cuts them by
    channels over the cores (:func:`jax_impl._onednn.splits_channels`) and their output image has at
    least 4x4 pixels. Cut by samples, oneDNN's per-sample kernels, its weight reorders and the per-chunk
    weight gradients cost more there than one GEMM over the batch (forward and backward 2-3x slower);
    cut by channels, ResNet-18's stage-3 and stage-4 convs at 224x224 (batch 4) and its stage-4 convs at
    64x64 (batch 32, 4x4 outputs) train faster on oneDNN than on the GEMM routes (12.3 against 14.0 ms),
    as does the DCGAN discriminator's 4x4 conv (7.2 against 8.2 ms), while on 2x2 images the GEMMs stay
    faster.
    """
    if not _onednn_sized(g) or _output_within_kernel(g, strictly=True) or takes_pointwise(g):
        return False
    if not _pixels_per_channel_at_most(g, _GEMM_FWD_PIXELS_PER_CHANNEL):
        return True
    from jax_impl import _onednn

    return (g.out_size[0] * g.out_size[1] >= _ONEDNN_FEW_PIXELS_MIN_IMAGE
            and _onednn.splits_channels(g.pixels, g.w_shape[1], g.w_shape[0]))


def takes_onednn_channels_last(g: ConvGeometry) -> bool:
    """oneDNN's channels-last forward for a conv on NHWC arrays (the eval path of ``_channels_last``):
    float32 on the CPU backend with oneDNN installed and enabled, a non-empty batch and output, at least
    ``2**22`` multiply-adds, and not a strided 1x1 kernel.

    Unlike :func:`takes_onednn`, convs with few output pixels per output channel qualify. What keeps them
    off oneDNN in NCHW (per-chunk weight gradients, weight and layout reorders) is absent from a forward
    that reads and writes NHWC in place, and the alternative here is Eigen's NHWC convolution, not the
    GEMM route: on ResNet-18's stage-3 and stage-4 shapes oneDNN's kernel measured as fast as Eigen's or
    faster (up to 1.75x at 7x7 with 512 channels).
    """
    return _onednn_sized(g) and not takes_pointwise(g)


def _onednn_sized(g: ConvGeometry) -> bool:
    """float32 on the CPU backend with oneDNN enabled, a non-empty batch and output, ``>= 2**22`` MACs."""
    return (g.dtype == "float32" and _cpu() and g.x_shape[0] > 0 and min(g.out_size) > 0
            and g.macs >= _ONEDNN_MIN_MACS and mkldnn.is_enabled())


def _output_within_kernel(g: ConvGeometry, strictly: bool = False) -> bool:
    """The output image has no more pixels than the kernel has taps (``strictly``: fewer), and the kernel more
    than one."""
    taps, pixels = g.w_shape[2] * g.w_shape[3], g.out_size[0] * g.out_size[1]
    return taps > 1 and (pixels < taps if strictly else pixels <= taps)


def _pixels_per_channel_at_most(g: ConvGeometry, per_channel: int) -> bool:
    """``0 < N*Ho*Wo <= per_channel * C_out``: the batch has few output pixels against the output channels."""
    return 0 < g.pixels <= per_channel * g.w_shape[0]


def takes_pointwise(g: ConvGeometry) -> bool:
    """A strided 1x1 kernel (dilation has no effect on one tap).

    A dot over the channels of the input's strided view reads NCHW in place,
    where XLA's convolution transposes input and output to NHWC and copies the
    weight to HWIO; jax's derivatives of the dot and the strided slice need
    no convolution either. Measured faster on XLA:CPU, forward and backward,
    for all of ResNet-18's downsamples. Stride 1 (ResNet-50's 1x1 convs)
    stays XLA's: there the forward gained but forward+backward lost (XLA
    shares the input's NHWC copy between the forward and the weight-gradient
    conv).
    """
    return _cpu() and g.w_shape[2:] == (1, 1) and max(g.stride) > 1 and g.x_shape[0] > 0


def takes_gemm(g: ConvGeometry) -> bool:
    """im2col + GEMM, forward and derivatives, when either

    - the output image is no larger than the kernel (ResNet's last stage at
      small inputs: 3x3 convs on 2x2 images), where XLA's convolution is
      pathologically slow, forward and strided backward alike; or
    - the batch has no more output pixels than the conv has output channels
      (``N*Ho*Wo <= C_out``, ResNet-18's last stage at 224x224 and batch 4):
      the column matrix (``N*Ho*Wo x C*kH*kW``) is then no larger than the
      weight, which the GEMM reads in place where XLA's convolution copies it
      into Eigen's HWIO layout (for the input gradient a second time, and the
      weight gradient back).
    """
    return _cpu() and (_output_within_kernel(g) or _pixels_per_channel_at_most(g, 1))


# The fused loop pays only for a conv tiny per output pixel (LeNet's first conv: 3*5*5 taps x 6
# outputs; its second, 6*5*5 taps x 16, is already faster in Eigen) ...
_DIRECT_MAX_TAPS = 128
_DIRECT_MAX_MACS = 1024  # taps * C_out per output pixel
# ... and big enough (LeNet's first conv at batch 256: 9e7 multiply-adds). Below this XLA's conv costs
# about the same, and keeping XLA's own op keeps its summation order: the fused loop on the 8x8
# digits' first conv moved a float32 parity run at its precision floor by 20% after 270 steps.
_DIRECT_MIN_WORK = 1 << 24


def takes_direct(g: ConvGeometry) -> bool:
    """One fused multiply-add loop over the taps (:mod:`~jax_impl.nn._conv_direct`), when the conv is a
    thin GEMM for Eigen (few multiply-adds per output pixel) with enough of them to pay for the loop."""
    taps = g.w_shape[1] * g.w_shape[2] * g.w_shape[3]
    if not _cpu() or taps > _DIRECT_MAX_TAPS or taps * g.w_shape[0] > _DIRECT_MAX_MACS:
        return False
    return g.pixels * taps * g.w_shape[0] >= _DIRECT_MIN_WORK and all(p >= 0 for pp in g.pads for p in pp)


_PACKED_DX_MAX_CHANNELS = 64  # C_in * kW
_PACKED_DX_MIN_WORK = 1 << 24  # multiply-adds of the input gradient (below: XLA's order kept)


def takes_packed_dx(g: ConvGeometry) -> bool:
    """XLA's forward, the input gradient with the kernel's column taps packed into channels
    (:func:`~jax_impl.nn._conv_grads.packed_input_grad`): a stride-1 conv with few input channels
    (LeNet's second conv: 6), whose plain input gradient is a conv with that few output channels,
    a GEMM Eigen runs far below torch's speed. Not with YNNPACK convs on: the weight gradient
    would be jax's rule, which YNNPACK takes."""
    c_out, c_in, kh, kw = g.w_shape
    return (not xla.YNN_CONVS and _cpu() and g.x_shape[0] > 0
            and g.stride == (1, 1) and g.dilation == (1, 1)
            and kw > 1 and c_in < xla.YNN_FEATURE_THRESHOLD and c_in * kw <= _PACKED_DX_MAX_CHANNELS
            and g.pixels * c_out * c_in * kh * kw >= _PACKED_DX_MIN_WORK)


# The phase split measured faster for ResNet-18's 7x7/2 stem and its layer-2 3x3/2 conv at 224x224,
# batch 4, and slower with 8 images or more, on a 14x14 output, and for 1x1 kernels.
_PHASE_DW_MAX_BATCH = 4
_PHASE_DW_MIN_PIXELS = 28 * 28


def takes_phase_dw(g: ConvGeometry) -> bool:
    """XLA's forward, the weight gradient split into the stride's phases
    (:func:`~jax_impl.nn._conv_grads.phase_weight_grad`): a strided conv over a batch of at most 4
    with an output of at least 28x28 and a kernel wider than 1."""
    return (not xla.YNN_CONVS and _cpu()
            and 0 < g.x_shape[0] <= _PHASE_DW_MAX_BATCH and max(g.stride) > 1 and g.dilation == (1, 1)
            and min(g.w_shape[2:]) > 1 and g.out_size[0] * g.out_size[1] >= _PHASE_DW_MIN_PIXELS)


# The GEMM forward measured faster up to 4x as many output pixels as output channels (ResNet-18's
# third stage at 224x224, batch 4: 4*14*14 <= 4*256) and slower at 16x; there the GEMM's
# derivatives cost more than XLA's, so this route keeps XLA's.
_GEMM_FWD_PIXELS_PER_CHANNEL = 4


def takes_gemm_forward(g: ConvGeometry) -> bool:
    """The GEMM forward (:func:`~jax_impl.nn._conv_gemm.gemm_forward_conv`) with XLA's conv derivatives,
    for ``N*Ho*Wo <= 4*C_out``; with YNNPACK convs on, XLA's weight-gradient conv would go to YNNPACK
    (:func:`takes_ynn_free` takes those convs)."""
    return _cpu() and not xla.YNN_CONVS and _pixels_per_channel_at_most(g, _GEMM_FWD_PIXELS_PER_CHANNEL)


# The block split measured faster on outputs of at least 28x28 (ResNet-18 at 224x224, batch 4: its
# first and second stages), inference unchanged.
_BLOCK_DW_MIN_PIXELS = 28 * 28


def takes_block_dw(g: ConvGeometry) -> bool:
    """XLA's forward, the weight gradient with spatial blocks moved into the batch
    (:func:`~jax_impl.nn._conv_grads.block_weight_grad`): a stride-1 conv over a batch under 16
    (whose weight-gradient conv has the batch as its few features) with an output of at least 28x28
    that the blocks tile."""
    n = g.x_shape[0]
    if (not _cpu() or xla.YNN_CONVS or g.stride != (1, 1) or g.dilation != (1, 1)
            or g.w_shape[2] * g.w_shape[3] == 1 or not 0 < n < grads.BLOCK_DW_FEATURES
            or g.out_size[0] * g.out_size[1] < _BLOCK_DW_MIN_PIXELS):
        return False
    return grads.blocks_for(n, g.out_size) > 0


def takes_ynn_free(g: ConvGeometry) -> bool:
    """XLA's forward and input gradient, the weight gradient kept away from YNNPACK
    (:func:`~jax_impl.nn._conv_grads.weight_grad_2d`): only when ``XLA_FLAGS`` left YNNPACK convs on
    and the weight-gradient conv has more than 16 features (which YNNPACK would take)."""
    return xla.YNN_CONVS and _cpu() and max(g.x_shape[0], g.w_shape[0]) > xla.YNN_FEATURE_THRESHOLD


# ----------------------------------------------------------------------------- the table


def _onednn(x, w, stride, pads, dilation):
    from jax_impl.nn import _conv_onednn  # imports jax's AD internals: only when the route is taken

    return _conv_onednn.conv2d(x, w, stride, pads, dilation)


def _pointwise(x, w, stride, pads, dilation):
    return gemm.pointwise_2d(x, w, stride, pads)  # jax's own derivatives: a dot and a strided slice


def _gemm(x, w, stride, pads, dilation):
    # An empty batch has no columns to transpose: the NCHW-ordered GEMM handles it.
    return gemm.gemm_conv(x, w, stride, pads, dilation) if x.size else gemm.gemm_2d(x, w, stride, pads, dilation)


def _xla(x, w, stride, pads, dilation):
    return xla.plain(x, w, stride, list(pads), dilation)


class Route(NamedTuple):
    """One row of :data:`ROUTES`.

    Attributes:
      name: what the route is called in tests and benchmarks.
      applies: the predicate on the conv's shapes.
      conv: ``(x, w, stride, pads, dilation) -> y``, the forward with the
        route's derivatives.
      traced_only: taken only while tracing (under ``jit``, ``grad``, ...):
        run eagerly, its many small ops would each be dispatched (and
        compiled) on their own, where XLA's convolution is one op.
    """

    name: str
    applies: Callable[[ConvGeometry], bool]
    conv: Callable[..., jax.Array]
    traced_only: bool = False


# Looked up at call time (``module.function``), so a test can replace an implementation.
ROUTES: tuple[Route, ...] = (
    Route("onednn", takes_onednn, _onednn),
    Route("pointwise", takes_pointwise, _pointwise),
    Route("gemm", takes_gemm, _gemm),
    Route("direct", takes_direct, lambda *a: direct.direct_conv(*a), traced_only=True),
    Route("packed_dx", takes_packed_dx, lambda *a: grads.packed_dx_conv(*a), traced_only=True),
    Route("phase_dw", takes_phase_dw, lambda *a: grads.phase_dw_conv(*a), traced_only=True),
    Route("gemm_forward", takes_gemm_forward, lambda *a: gemm.gemm_forward_conv(*a)),
    Route("block_dw", takes_block_dw, lambda *a: grads.block_dw_conv(*a), traced_only=True),
    Route("ynn_free", takes_ynn_free, lambda *a: grads.ynn_free_conv(*a)),
    Route("xla", lambda g: True, _xla),
)


def route_for(geometry: ConvGeometry, traced: bool = True) -> Route:
    """The first row of :data:`ROUTES` that applies (``traced=False``: skipping the traced-only ones)."""
    return next(r for r in ROUTES if (traced or not r.traced_only) and r.applies(geometry))


def conv2d_core(x, w, stride: tuple[int, int], pads, dilation: tuple[int, int]):
    """The 2-D, ungrouped convolution of ``jax_impl.nn.functional.conv2d`` (no bias; ``pads`` as ``[(lo, hi)] * 2``).

    Same sums as ``lax.conv_general_dilated`` by every route (see :data:`ROUTES`).
    """
    geometry = ConvGeometry.of(x.shape, w.shape, stride, pads, dilation, jax.numpy.result_type(x, w))
    route = route_for(geometry, traced=isinstance(x, jax.core.Tracer))
    return route.conv(x, w, geometry.stride, geometry.pads, geometry.dilation)


# ----------------------------------------------------------------------------- transposed convolution


def transpose_geometry(x_shape, w_shape, stride, padding, output_padding, dilation, dtype="float32") -> ConvGeometry:
    """The forward conv whose input gradient a 2-D transposed conv is.

    A transposed conv of ``x`` (``(N, C_in, H, W)``) with torch's weight ``(C_in, C_out, kH, kW)`` is the
    adjoint of the conv from its output (``(N, C_out, H_out, W_out)``) to ``x``'s shape, whose OIHW weight is
    that same array. Its pads are torch's ``padding`` low and ``padding - output_padding`` high, as torch
    hands them to oneDNN's deconvolution (``mkldnn/Conv.cpp``, ``padding_r``): the output-padding rows then
    lie beyond the forward conv's last window, and its output size is exactly ``(H, W)``.
    """
    out = [(n - 1) * s - 2 * p + d * (k - 1) + 1 + op
           for n, s, p, d, k, op in zip(x_shape[2:], stride, padding, dilation, w_shape[2:], output_padding)]
    pads = [(p, p - op) for p, op in zip(padding, output_padding)]
    return ConvGeometry.of((x_shape[0], w_shape[1], *out), w_shape, stride, pads, dilation, dtype)


def takes_onednn_transpose(g: ConvGeometry) -> bool:
    """oneDNN's backward-data kernel for a transposed conv (``g`` from :func:`transpose_geometry`): float32
    on the CPU backend with oneDNN enabled, at least ``2**22`` multiply-adds, and ``output_padding`` smaller
    than the stride (the high pad above ``-stride``, as oneDNN requires).

    XLA's transposed conv is its convolution over the stride-dilated input (``lhs_dilation``): at stride 2,
    three quarters of its multiplications are by the inserted zeros, and jax's input and weight gradients
    of it are dilated the same way. oneDNN's backward-data kernel (torch's deconvolution on the CPU) skips
    them, and its derivatives are oneDNN's forward conv and weight gradient.
    """
    return _onednn_sized(g) and all(hi > -s for (_, hi), s in zip(g.pads, g.stride))


def conv_transpose2d_core(x, w, stride, padding, output_padding, dilation):
    """The 2-D, ungrouped transposed conv of ``jax_impl.nn.functional`` (no bias; torch's weight layout) by
    oneDNN when :func:`takes_onednn_transpose` holds; ``None`` where it does not (the caller runs XLA's)."""
    g = transpose_geometry(x.shape, w.shape, stride, padding, output_padding, dilation, jax.numpy.result_type(x, w))
    if not takes_onednn_transpose(g):
        return None
    from jax_impl.nn import _conv_onednn  # imports jax's AD internals: only when the route is taken

    return _conv_onednn.conv2d_input_grad(x, w, g.x_shape, g.stride, g.pads, g.dilation)
