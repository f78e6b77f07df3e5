"""``torch.nn.functional.interpolate`` with torch's CPU index and weight arithmetic.

torch resamples every spatial dimension with a table of source indices and weights per output position
(``aten/src/ATen/native/UpSample.h`` and ``cpu/UpSampleKernel.cpp``). The tables depend only on the sizes, the
scales and the dtype, so they are built here in NumPy, in the dtype torch builds them in (its ``opmath`` type:
float32 for float32 input, float64 for float64), with its operation order; the interpolation itself is ``jnp``
gathers and weighted sums, whose autodiff is torch's backward (the same weights, scattered back).

Per dimension of input size ``I`` and output size ``O``, with ``s`` the user's ``scale_factor`` when torch passes
it to its kernel (``recompute_scale_factor`` not set) and ``I / O`` otherwise:

- ``scale = (I - 1) / (O - 1)`` with ``align_corners`` (0 when ``O == 1``), else ``1 / s``;
- ``src(i) = scale * i`` with ``align_corners``, else ``scale * (i + 0.5) - 0.5`` (clamped at 0 but for cubic);
- nearest: ``floor(scale * i)``; nearest-exact: ``floor(src(i) + 0.5)`` (both capped at ``I - 1``);
- linear: ``x[floor(src)] * (1 - l) + x[floor(src) + 1] * l``, ``l = src - floor(src)``;
- cubic: four taps ``floor(src) - 1 .. floor(src) + 2`` (clamped to the edges) with Keys' kernel, ``A = -0.75``;
- antialias (bilinear/bicubic, PIL's resampling): the triangle or Keys ``A = -0.5`` kernel stretched by
  ``scale`` when downsampling, normalised over the taps inside the input; the last dimension first.

Multi-dimensional modes apply the last dimension innermost: ``out = sum_j w_h[j] * sum_k w_w[k] x[h_j, w_k]``,
accumulated tap by tap, as torch's generic kernel; 2-d bilinear with ``H_out + W_out <= 128`` and 2-d nearest
with ``H_out + W_out <= 128`` take torch's other kernel (corner weights ``w_h * w_w``; float32 index arithmetic
for nearest), as torch 2.13 routes them.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.random.fma import fma32, fma64

__all__ = ["interpolate", "upsample", "upsample_bilinear", "upsample_nearest"]

_NO_CORNERS = ("nearest", "area", "nearest-exact")
_NEEDS_DIM = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5, "lanczos": 4}
# torch routes 2-d bilinear and nearest through its channels-last kernel when the output is this small
# (UpSampleKernel.cpp, _use_vectorized_kernel_cond_2d).
_SMALL_2D_OUTPUT = 128


def _is_integer(value) -> bool:
    # torch/nn/functional.py _is_integer: Python and NumPy ints (and integer tensors) count as sizes.
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, (jax.Array, np.ndarray)) and value.ndim == 0 and jnp.issubdtype(value.dtype,
                                                                                             jnp.integer)


# ----------------------------------------------------------------------------- torch's argument handling


def _sizes_and_scales(x, size, scale_factor, mode, recompute_scale_factor):
    """``(output_size, scales)`` as torch/nn/functional.py's interpolate resolves them (one of the two None)."""
    dim = x.ndim - 2
    spatial = list(x.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scales = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got "
                    f"input with spatial dimensions of {spatial} and output size of {size}. "
                    "Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                    "output size in (o1, o2, ...,oK) format.")
            if not all(_is_integer(s) for s in size):
                raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                                f"Tuple[int, int, int], but got size with types {[type(s) for s in size]}")
            output_size = [int(s) for s in size]
        else:
            output_size = [int(size)] * dim
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {spatial} and "
                    f"scale_factor of shape {scale_factor}. "
                    "Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                    "scale_factor in (s1, s2, ...,sK) format.")
            scales = list(scale_factor)
        else:
            scales = [scale_factor] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")

    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    # torch: "area" always takes an explicit size, computed as the recompute path does.
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        output_size = [int(n * s) for n, s in zip(spatial, scales)]
        scales = None
    if scales is not None:
        scales = [float(s) for s in scales]
        # aten upsample::compute_output_size: the size is the product truncated to an integer.
        output_size = [int(n * s) for n, s in zip(spatial, scales)]
    return output_size, scales


def _check_shapes(x, output_size) -> None:
    """aten UpSample.h ``upsample_{1,2,3}d_common_check`` and ``upsample_*_shape_check``, with their messages."""
    spatial = x.shape[2:]
    if not all(n > 0 for n in spatial) or not all(o > 0 for o in output_size):
        if len(spatial) == 1:
            raise RuntimeError(f"Input and output sizes should be greater than 0, but got input (W: {spatial[0]}) "
                               f"and output (W: {output_size[0]})")
        names = "HW" if len(spatial) == 2 else "DHW"
        got_in = ", ".join(f"{n}: {v}" for n, v in zip(names, spatial))
        got_out = ", ".join(f"{n}: {v}" for n, v in zip(names, output_size))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({got_in}) "
                           f"output ({got_out})")
    if x.size == 0 and x.shape[1] == 0:
        raise RuntimeError(f"Non-empty {x.ndim}D data tensor expected but got a tensor with sizes {list(x.shape)}")


# ----------------------------------------------------------------------------- index and weight tables (NumPy)


def _compute_scale(in_size: int, out_size: int, align_corners: bool, scale, dt) -> np.floating:
    """aten ``area_pixel_compute_scale<dt>`` (``compute_scales_value`` when not aligning corners)."""
    if align_corners:
        return dt(in_size - 1) / dt(out_size - 1) if out_size > 1 else dt(0)
    if scale is not None and scale > 0:
        return dt(1.0 / scale)
    return dt(in_size) / dt(out_size)


def _fma(a, b, c, dt) -> np.ndarray:
    """``a * b + c`` rounded once: torch's kernels are compiled with FMA contraction (GCC's default)."""
    return (fma32 if dt == np.float32 else fma64)(a, b, c).astype(dt)


def _source_index(scale, out_size: int, align_corners: bool, cubic: bool, dt) -> np.ndarray:
    """aten ``area_pixel_compute_source_index<dt>`` for every output position."""
    i = np.arange(out_size).astype(dt)
    if align_corners:
        return scale * i
    src = _fma(scale, i + dt(0.5), dt(-0.5), dt)
    return src if cubic else np.where(src < 0, dt(0), src)


def _floorf(value: np.ndarray) -> np.ndarray:
    # torch floors with C's floorf, which first rounds a double argument to float32.
    return np.floor(np.asarray(value).astype(np.float32)).astype(np.int64)


def _guard_index_and_lambda(real: np.ndarray, in_size: int, dt):
    """aten ``guard_index_and_lambda``: the lower tap and the fraction past it, clamped to [0, 1]."""
    index = np.minimum(_floorf(real), in_size - 1)
    lam = np.clip(real - index.astype(dt), dt(0), dt(1)).astype(dt)
    return index, lam


def _nearest_table(in_size: int, out_size: int, scale, exact: bool, float32_index: bool, dt) -> np.ndarray:
    """Source indices of ``nearest`` / ``nearest-exact``, shape ``(O,)``.

    torch's generic kernel computes them in ``dt`` (``HelperInterpNearest{,Exact}``); ``nearest_idx`` /
    ``nearest_exact_idx`` (its 2-d channels-last kernel, and every nearest backward) in float32, with exact
    shortcuts for ``O == I`` and ``O == 2 I`` in plain nearest.
    """
    i = np.arange(out_size)
    if float32_index:
        f32 = np.float32
        s = _compute_scale(in_size, out_size, False, scale, f32)
        if exact:
            idx = _floorf((i + 0.5) * np.float64(s))
        elif out_size == in_size:
            idx = i
        elif out_size == 2 * in_size:
            idx = i >> 1
        else:
            idx = _floorf(i.astype(f32) * s)
    else:
        s = _compute_scale(in_size, out_size, False, scale, dt)
        if exact:
            idx = _floorf(_source_index(s, out_size, False, False, dt).astype(np.float64) + 0.5)
        else:
            idx = _floorf(s * i.astype(dt))
    return np.minimum(idx, in_size - 1)


def _linear_table(in_size, out_size, align_corners, scale, dt):
    """aten ``compute_source_index_and_lambda``: taps ``(i0, i1)`` and weights ``(1 - l, l)``, shape ``(O, 2)``."""
    if out_size == in_size:
        i = np.arange(out_size)
        return np.stack([i, i], 1), np.stack([np.ones(out_size, dt), np.zeros(out_size, dt)], 1)
    s = _compute_scale(in_size, out_size, align_corners, scale, dt)
    i0, l1 = _guard_index_and_lambda(_source_index(s, out_size, align_corners, False, dt), in_size, dt)
    i1 = i0 + (i0 < in_size - 1)
    return np.stack([i0, i1], 1), np.stack([dt(1) - l1, l1], 1)


def _cubic_convolution1(x, a, dt):
    """``((A + 2) x - (A + 3)) x x + 1``; torch's build fuses the innermost multiply-add only (measured)."""
    return (_fma(a + dt(2), x, -(a + dt(3)), dt) * x * x + dt(1)).astype(dt)


def _cubic_convolution2(x, a, dt):
    """``((A x - 5 A) x + 8 A) x - 4 A``; torch's build fuses the two inner multiply-adds (measured)."""
    return (_fma(_fma(a, x, -(dt(5) * a), dt), x, dt(8) * a, dt) * x - dt(4) * a).astype(dt)


def _cubic_table(in_size, out_size, align_corners, scale, dt):
    """aten ``HelperInterpCubic::compute_indices_weights``: four clamped taps, Keys' weights with A = -0.75."""
    s = _compute_scale(in_size, out_size, align_corners, scale, dt)
    index, t = _guard_index_and_lambda(_source_index(s, out_size, align_corners, True, dt), in_size, dt)
    a = dt(-0.75)
    # get_cubic_upsample_coefficients: t + 1.0 and 1.0 - t are double sums rounded to dt.
    x2 = (1.0 - t.astype(np.float64)).astype(dt)
    weights = np.stack([
        _cubic_convolution2((t.astype(np.float64) + 1.0).astype(dt), a, dt),
        _cubic_convolution1(t, a, dt),
        _cubic_convolution1(x2, a, dt),
        _cubic_convolution2((x2.astype(np.float64) + 1.0).astype(dt), a, dt),
    ], 1).astype(dt)
    taps = np.clip(index[:, None] + np.arange(-1, 3)[None, :], 0, in_size - 1)
    return taps, weights


def _aa_filter(x: np.ndarray, cubic: bool, dt) -> np.ndarray:
    """PIL's triangle filter, or Keys' cubic with A = -0.5 (aten ``HelperInterp{Linear,Cubic}::aa_filter``)."""
    x = np.abs(x)
    if not cubic:
        return np.where(x < 1.0, dt(1) - x, dt(0)).astype(dt)
    a = dt(-0.5)
    return np.where(x < 1.0, _cubic_convolution1(x, a, dt),
                    np.where(x < 2.0, _cubic_convolution2(x, a, dt), dt(0))).astype(dt)


def _antialias_table(in_size, out_size, align_corners, scale, cubic: bool, dt):
    """aten ``_compute_indices_min_size_weights_aa``: a variable number of taps per output, padded with weight 0.

    Returns ``(taps, weights, counts)``: taps ``xmin + j`` (clamped), weights normalised by their float sum.
    """
    s = _compute_scale(in_size, out_size, align_corners, scale, dt)
    interp_size = 4 if cubic else 2
    wide = s >= 1.0
    support = dt(interp_size * 0.5 * np.float64(s)) if wide else dt(interp_size * 0.5)
    max_taps = int(math.ceil(support)) * 2 + 1
    invscale = dt(1.0 / np.float64(s)) if wide else dt(1.0)
    taps = np.zeros((out_size, max_taps), np.int64)
    weights = np.zeros((out_size, max_taps), dt)
    counts = np.zeros(out_size, np.int64)
    for i in range(out_size):
        center = dt(np.float64(s) * (i + 0.5))
        xmin = max(int(np.float64(center - support) + 0.5), 0)
        xsize = min(int(np.float64(center + support) + 0.5), in_size) - xmin
        xsize = min(max(xsize, 0), max_taps)
        j = np.arange(xsize)
        offset = (j + xmin).astype(dt) - center  # int64 - float: the integer is converted first
        w = _aa_filter(((offset.astype(np.float64) + 0.5) * np.float64(invscale)).astype(dt), cubic, dt)
        total = dt(0)
        for value in w:
            total = dt(total + value)
        if total != 0:
            w = (w / total).astype(dt)
        taps[i, :xsize] = j + xmin
        taps[i, xsize:] = min(xmin, in_size - 1)
        weights[i, :xsize] = w
        counts[i] = xsize
    return taps, weights, counts


# ----------------------------------------------------------------------------- applying the tables (jnp)


def _along(values: np.ndarray, axis: int, ndim: int) -> jax.Array:
    shape = [1] * ndim
    shape[axis] = values.shape[0]
    return jnp.asarray(values.reshape(shape))


def _rounded(x: jax.Array) -> jax.Array:
    """``x`` materialised on its own, so XLA cannot contract it into a fused multiply-add with a later sum."""
    return jax.lax.optimization_barrier(x)


def _resample_axis(x, axis: int, taps: np.ndarray, weights: np.ndarray, counts: np.ndarray | None = None):
    """``out[..., i, ...] = sum_k x[..., taps[i, k], ...] * weights[i, k]``, accumulated in tap order.

    torch's compiled kernels (GCC contracts ``a * b + c``) compute ``fma(t0, w0, t1 w1)``, then
    ``acc = fma(tk, wk, acc)`` for further taps (measured). Keeping ``t1 w1`` rounded on its own leaves XLA one
    contraction per sum, the same. With ``counts``, tap ``k`` of output ``i`` is added only when
    ``k < counts[i]`` (antialias: a variable number of taps, so padding adds nothing, not even ``0 * inf``).
    """

    def term(k):
        return jnp.take(x, jnp.asarray(taps[:, k]), axis=axis) * _along(weights[:, k], axis, x.ndim).astype(x.dtype)

    if counts is not None:
        acc = term(0)
        for k in range(1, taps.shape[1]):
            acc = jnp.where(_along(k < counts, axis, x.ndim), acc + term(k), acc)
        return acc
    acc = term(0) + _rounded(term(1))
    for k in range(2, taps.shape[1]):
        acc = acc + term(k)
    return acc


def _bilinear_corners(x, h_table, w_table, dt):
    """torch's channels-last bilinear kernel: corner weights ``w_ab = lh_a * lw_b`` and four products.

    Its vectorised part (``Vectorized`` lanes of 32 bytes, over whole groups of channels) computes
    ``fma(x00, w00, fma(x01, w01, fma(x11, w11, x10 w10)))``, its scalar tail (the remaining channels)
    ``fma(x11, w11, fma(x10, w10, fma(x00, w00, x01 w01)))`` (measured on torch 2.13's x86 build).
    """
    (h_taps, h_w), (w_taps, w_w) = h_table, w_table

    def corners(v):
        rows = [jnp.take(v, jnp.asarray(h_taps[:, a]), axis=-2) for a in range(2)]
        return [[jnp.take(rows[a], jnp.asarray(w_taps[:, b]), axis=-1)
                 * jnp.asarray((h_w[:, a][:, None] * w_w[:, b][None, :]).astype(dt)).astype(v.dtype)
                 for b in range(2)] for a in range(2)]

    lanes = 32 // x.dtype.itemsize
    vectorised = x.shape[1] - x.shape[1] % lanes
    parts = []
    if vectorised:
        p = corners(x[:, :vectorised])
        parts.append(p[0][0] + (p[0][1] + (p[1][1] + _rounded(p[1][0]))))
    if vectorised < x.shape[1]:
        p = corners(x[:, vectorised:])
        parts.append(((p[0][0] + _rounded(p[0][1])) + p[1][0]) + p[1][1])
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)


def _scatter_axis(g, axis: int, taps: np.ndarray, in_size: int):
    """The transpose of ``take(x, taps, axis)``: ``g`` summed into the input positions it was read from."""
    moved = jnp.moveaxis(g, axis, 0)
    summed = jax.ops.segment_sum(moved, jnp.asarray(taps), num_segments=in_size)
    return jnp.moveaxis(summed, 0, axis)


def _nearest(x, forward: list[np.ndarray], backward: list[np.ndarray]):
    """Gathers along the spatial axes (``forward[d]`` for axis ``d + 2``), differentiated with ``backward``.

    torch's nearest backward always indexes with ``nearest_idx`` while some forward kernels do not; where the
    two tables differ its gradient is not its forward's transpose, and this one follows it.
    """

    def gather(v):
        for axis in reversed(range(len(forward))):
            v = jnp.take(v, jnp.asarray(forward[axis]), axis=axis + 2)
        return v

    if all(np.array_equal(f, b) for f, b in zip(forward, backward)):
        return gather(x)
    in_sizes = x.shape[2:]

    @jax.custom_vjp
    def resampled(v):
        return gather(v)

    def resampled_fwd(v):
        return gather(v), None

    def resampled_bwd(_, g):
        for axis in range(len(backward)):
            g = _scatter_axis(g, axis + 2, backward[axis], in_sizes[axis])
        return (g,)

    resampled.defvjp(resampled_fwd, resampled_bwd)
    return resampled(x)


def _reduced_weights(weights: np.ndarray, mode: str, dtype) -> np.ndarray:
    """The generic kernel's weight table for bfloat16 / float16 input: stored in the input's dtype, the linear
    ``1 - l`` computed from the stored ``l`` (``compute_source_index_and_lambda<scalar_t>``)."""
    stored = weights.astype(dtype)
    if mode != "bicubic":
        stored[:, 0] = (np.float32(1) - stored[:, 1].astype(np.float32)).astype(dtype)
    return stored.astype(np.float32)


def _compute_dtype(x):
    # The reduced float types resample in float32 (torch's opmath) and round once at the end.
    return np.float64 if x.dtype == jnp.float64 else np.float32


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _resample(x, output_size: tuple[int, ...], scales: tuple[float | None, ...], mode: str, align_corners: bool,
              antialias: bool):
    """The resampling, compiled: XLA then contracts ``t0 * w0 + t1 * w1`` into the fused multiply-adds torch's
    compiled kernels compute (eagerly each product would round on its own)."""
    nd = x.ndim - 2
    dt = _compute_dtype(x)
    work = x if x.dtype in (jnp.float32, jnp.float64) else x.astype(jnp.float32)
    in_sizes = x.shape[2:]
    small_2d = nd == 2 and output_size[0] + output_size[1] <= _SMALL_2D_OUTPUT
    if antialias:
        if tuple(in_sizes) == tuple(output_size):
            return x
        # torch's separable kernel: the last dimension first, then the others from the inside out;
        # dimensions whose size does not change are skipped.
        for axis in reversed(range(nd)):
            if in_sizes[axis] != output_size[axis]:
                taps, weights, counts = _antialias_table(in_sizes[axis], output_size[axis], align_corners,
                                                         scales[axis], mode == "bicubic", dt)
                work = _resample_axis(work, axis + 2, taps, weights, counts)
        return work.astype(x.dtype)
    if mode in ("nearest", "nearest-exact"):
        exact = mode == "nearest-exact"
        forward = [_nearest_table(i, o, s, exact, small_2d, dt) for i, o, s in zip(in_sizes, output_size, scales)]
        backward = [_nearest_table(i, o, s, exact, True, dt) for i, o, s in zip(in_sizes, output_size, scales)]
        return _nearest(work, forward, backward).astype(x.dtype)
    if mode == "bicubic":
        tables = [_cubic_table(i, o, align_corners, s, dt) for i, o, s in zip(in_sizes, output_size, scales)]
    else:
        tables = [_linear_table(i, o, align_corners, s, dt) for i, o, s in zip(in_sizes, output_size, scales)]
    if mode == "bilinear" and small_2d:
        return _bilinear_corners(work, tables[0], tables[1], dt).astype(x.dtype)
    if x.dtype != work.dtype:
        tables = [(taps, _reduced_weights(w, mode, x.dtype)) for taps, w in tables]
    for axis in reversed(range(nd)):
        work = _resample_axis(work, axis + 2, *tables[axis])
    return work.astype(x.dtype)


# ----------------------------------------------------------------------------- the public functions


def interpolate(input: jax.Array, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> jax.Array:
    """``torch.nn.functional.interpolate`` on ``(N, C, *S)`` input, with torch's CPU arithmetic.

    Modes: ``nearest``, ``nearest-exact`` (3-5-d), ``linear`` (3-d), ``bilinear`` and ``bicubic`` (4-d, both
    with ``antialias``), ``trilinear`` (5-d), ``area`` (``adaptive_avg_pool{1,2,3}d`` to the output size).
    ``scale_factor`` without ``recompute_scale_factor`` reaches the index arithmetic as ``1 / scale_factor``;
    with it (and for ``area``), the output size ``floor(S * scale_factor)`` does, as ``S / size``.

    Raises:
      ValueError, TypeError: torch's messages for conflicting or malformed ``size`` / ``scale_factor`` /
        ``align_corners`` / ``antialias``.
      NotImplementedError: a mode for the wrong number of dimensions (torch's messages); ``mode='lanczos'``;
        non-floating input.
      RuntimeError: an empty input or output size (torch's message).
    """
    x = jnp.asarray(input)
    if mode in _NO_CORNERS:
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    output_size, scales = _sizes_and_scales(x, size, scale_factor, mode, recompute_scale_factor)
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and x.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a "
                         "4-D tensor as input")

    known = mode in ("nearest", "nearest-exact", "area") and x.ndim in (3, 4, 5)
    if not known and _NEEDS_DIM.get(mode) != x.ndim:
        if mode in ("linear", "bilinear", "trilinear") and x.ndim in (3, 4, 5):
            raise NotImplementedError(f"Got {x.ndim}D input, but {mode} mode needs {_NEEDS_DIM[mode]}D input")
        raise NotImplementedError(
            "Input Error: Only 3D, 4D and 5D input Tensors supported"
            f" (got {x.ndim}D) for the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
            f"nearest-exact (got {mode})")
    if mode == "lanczos":
        if align_corners:
            raise ValueError("Lanczos mode does not support align_corners=True")
        if not antialias:
            raise ValueError("Lanczos mode requires antialias=True")
        raise NotImplementedError("interpolate(mode='lanczos') is not implemented in jax_impl")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise NotImplementedError(f"interpolate on {x.dtype} input is not implemented in jax_impl (floating "
                                  "input only)")
    if mode == "area":
        from jax_impl.nn import functional as F  # functional re-exports this module: imported when called

        return getattr(F, f"adaptive_avg_pool{x.ndim - 2}d")(x, output_size)
    _check_shapes(x, output_size)
    if antialias and x.dtype not in (jnp.float32, jnp.float64):
        name = {"bfloat16": "BFloat16", "float16": "Half"}[x.dtype.name]
        raise NotImplementedError(f'"compute_index_ranges_weights" not implemented for \'{name}\'')
    scales = (None,) * len(output_size) if scales is None else tuple(scales)
    return _resample(x, tuple(output_size), scales, mode, bool(align_corners), bool(antialias))


def upsample(input: jax.Array, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> jax.Array:
    """``torch.nn.functional.upsample`` (deprecated in torch): :func:`interpolate` with these arguments."""
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: jax.Array, size=None, scale_factor=None) -> jax.Array:
    """``torch.nn.functional.upsample_nearest`` (deprecated in torch): ``interpolate(..., mode='nearest')``."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: jax.Array, size=None, scale_factor=None) -> jax.Array:
    """``torch.nn.functional.upsample_bilinear`` (deprecated in torch): bilinear with ``align_corners=True``."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
