"""``torch.nn.functional.fractional_max_pool2d/3d``: max pooling with pseudo-random window starts (Graham 2014).

torch (``torch/nn/functional.py``; ``aten/src/ATen/native/FractionalMaxPool2d.cpp``,
``FractionalMaxPool3d.cpp``, ``FractionalMaxPooling.h``):

- without ``_random_samples`` it draws ``torch.rand(N, C, nd, dtype=input.dtype)``
  (``N = 1`` for unbatched input) from the global generator, before any size check;
  here the draw comes from :data:`jax_impl.random.default_generator`, the same
  numbers that leave the generator where torch leaves it (eagerly at the call;
  traced, an ordered host callback drawing at each run of the compiled function);
- per plane ``(n, c)`` and spatial axis, with sample ``u`` (2-d: ``u[..., 0]``
  for the width, ``u[..., 1]`` for the height; 3-d: ``u[..., 0/1/2]`` for
  time/height/width), ``generate_intervals`` gives the window starts, in the
  input's dtype (``scalar_t``: float32 arithmetic for float32 input)::

      alpha = scalar_t(L - K) / scalar_t(O - 1)
      start[i] = int((i + u) * alpha) - int(u * alpha)    for i < O - 1
      start[O - 1] = L - K

- each window ``[start, start + K)`` is scanned in row-major order from
  ``-inf``, keeping ``val > max or isnan(val)``: the first maximum wins ties,
  a window holding NaN returns its last NaN; the index is the flat offset in
  the input plane (``h * W + w``; 3-d ``(t * H + h) * W + w``);
- the backward adds each output's gradient to the input element at its index,
  in the outputs' row-major order (here the transpose of the gather at the
  indices, a scatter-add in that order).

float16 and bfloat16 input with ``_random_samples`` given round each step of
``generate_intervals`` to the dtype, as ``c10::Half`` / ``c10::BFloat16``
arithmetic does; drawing the samples for them raises ``NotImplementedError``
(torch-identical ``rand`` covers float32 and float64).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl import amp
from jax_impl.random import default_generator

__all__ = [
    "fractional_max_pool2d", "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d", "fractional_max_pool3d_with_indices",
]

_DRAWN = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))


def _ntuple(value, n: int) -> tuple:
    # torch's _pair/_triple: an iterable passes through unchanged, a scalar repeats.
    return tuple(value) if isinstance(value, Iterable) else (value,) * n


def _size(x, dim: int) -> int:
    """``Tensor.size(dim)`` with torch's ``IndexError`` for a dimension out of range."""
    n = max(x.ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return x.shape[dim]


def _int_list(value, nd: int, what: str, fn: str) -> tuple[int, ...]:
    """An ``int[nd]`` argument as aten's argument parser reads it (an int repeats; sequences keep their length)."""
    values = tuple(int(v) for v in value) if isinstance(value, Sequence) else (int(value),) * nd
    if len(values) != nd:
        tail = "a single Int or tuple of Ints" if nd == 2 else "a single Int or tuple of three Ints"
        raise RuntimeError(f"{fn}: {what} must either be {tail}")
    return values


def _draw(x, shape: tuple[int, ...]):
    """``torch.rand(*shape, dtype=x.dtype)`` from torch's global stream (see the module docstring)."""
    if x.dtype not in _DRAWN:
        raise NotImplementedError(f"fractional max pooling drawing its own samples for {x.dtype} input: torch's rand "
                                  "is reproduced for float32 and float64; pass _random_samples")
    if isinstance(x, jax.core.Tracer):
        return default_generator.staged_rand(shape, x.dtype, tied_to=x)
    return jnp.asarray(default_generator.rand(shape, x.dtype))


def _meta_checks(nd: int, x, kernel: tuple[int, ...], out: tuple[int, ...]) -> None:
    """aten's meta functions' checks (``TORCH_META_FUNC(fractional_max_pool2d/3d)``), in their order."""
    name = "fractional_max_pool2d()" if nd == 2 else "fractional_max_pool3d_out()"
    sizes = "[" + ", ".join(map(str, x.shape)) + "]"
    if x.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: Expected {nd + 1}D or {nd + 2}D tensor, but got: {sizes}")
    for i in range(1, x.ndim):
        if x.shape[i] <= 0:
            raise RuntimeError(f"{name}: Expected input to have non-zero size for non-batch dimensions, but got"
                               f"{sizes} with dimension {i} being empty.")
    spatial = x.shape[-nd:]
    if nd == 2:
        # The 2-d kernel admits windows ending at the input's last element.
        for label, k, o, n in zip(("height", "width"), kernel, out, spatial):
            if o + k - 1 > n:
                raise RuntimeError(f"{name}: pool {label} {k} too large relative to input {label} {n}")
    else:
        # The 3-d one wants a strict inequality, and checks width before height.
        for axis, label in ((0, "time"), (2, "width"), (1, "height")):
            if out[axis] + kernel[axis] - 1 >= spatial[axis]:
                raise RuntimeError(f"{name}: pool {label} {kernel[axis]} too large relative to input {label} "
                                   f"{spatial[axis]}")
    shape = x.shape[:-nd] + tuple(out)
    if min(out) < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: "
                           f"[{', '.join(map(str, shape))}]")


def _sample_checks(nd: int, x, samples) -> None:
    """aten's ``fractional_max_pool_check_shape``."""
    if samples.dtype != x.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.ndim}")
    batch, channels = (1, x.shape[0]) if x.ndim == nd + 1 else x.shape[:2]
    if samples.shape[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != channels:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got {samples.shape[2]}.")


def _intervals(u, length: int, out: int, k: int):
    """aten's ``generate_intervals`` for samples ``u`` of any shape: window starts ``u.shape + (out,)``."""
    last = jnp.full(u.shape + (1,), length - k, jnp.int32)
    if out == 1:
        return last
    dtype = jnp.dtype(u.dtype)
    if dtype in _DRAWN:
        work = dtype
        # static_cast<scalar_t>(L - K) / static_cast<scalar_t>(O - 1): one IEEE division, on the host.
        alpha = dtype.type(length - k) / dtype.type(out - 1)

        def rnd(v):
            return v
    else:
        # c10::Half / c10::BFloat16 compute each operation in float and round the result to their format.
        info = jnp.finfo(dtype)
        work = jnp.dtype(jnp.float32)

        def half(v):
            return np.float32(np.asarray(v, np.float32).astype(dtype))

        alpha = half(half(length - k) / half(out - 1))

        def rnd(v):
            return lax.reduce_precision(v, exponent_bits=info.nexp, mantissa_bits=info.nmant)

    s = u.astype(work)[..., None]
    i = rnd(jnp.arange(out - 1, dtype=work))
    alpha = jnp.asarray(alpha, work)
    starts = rnd(rnd(i + s) * alpha).astype(jnp.int32) - rnd(s * alpha).astype(jnp.int32)
    return jnp.concatenate([starts, jnp.broadcast_to(last, starts.shape[:-1] + (1,))], axis=-1)


def _select(windows):
    """The slot torch's scan keeps: the first maximum, or the last NaN where a NaN is present."""
    is_nan = jnp.isnan(windows)
    any_nan = jnp.any(is_nan, axis=-1)
    # XLA:CPU's vectorised max can drop NaN: NaN windows are found separately and never read `m`.
    m = jnp.max(windows, axis=-1, keepdims=True)
    hit = jnp.where(any_nan[..., None], is_nan, windows == m)
    size = windows.shape[-1]
    first = jnp.argmax(hit, axis=-1)
    last = size - 1 - jnp.argmax(hit[..., ::-1], axis=-1)
    return jnp.where(any_nan, last, first)


# One compiled program per geometry: run op by op, the gathers and the selection compile dozens of kernels.
@partial(jax.jit, static_argnums=(2, 3))
def _pool(x, samples, kernel: tuple[int, ...], out: tuple[int, ...]):
    """Values and flat plane indices for batched ``x`` ``(N, C, *S)`` and samples ``(>= N, C, nd)``."""
    nd = len(kernel)
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    u = samples[:n]
    # The sample each spatial axis reads (2-d: width u[..., 0], height u[..., 1]; 3-d in order).
    order = (1, 0) if nd == 2 else (0, 1, 2)
    flat = jnp.zeros((n, c) + (1,) * (2 * nd), jnp.int32)
    for axis, (j, length, o, k) in enumerate(zip(order, spatial, out, kernel)):
        starts = _intervals(u[..., j], length, o, k)  # (N, C, O)
        pos = starts[..., None] + jnp.arange(k, dtype=jnp.int32)  # (N, C, O, K)
        # Axis `axis` of the output grid and of the window: (N, C, O_0, .., O_nd-1, K_0, .., K_nd-1).
        shape = [n, c] + [1] * (2 * nd)
        shape[2 + axis], shape[2 + nd + axis] = o, k
        flat = flat * length + pos.reshape(shape)
    flat = flat.reshape(n, c, *out, math.prod(kernel))
    planes = x.reshape(n, c, -1)
    windows = jnp.take_along_axis(lax.stop_gradient(planes), flat.reshape(n, c, -1), axis=2)
    chosen = _select(windows.reshape(flat.shape))
    index = jnp.take_along_axis(flat, chosen[..., None], axis=-1)[..., 0]
    # The gradient flows through this gather alone: its transpose adds in the outputs' row-major order.
    values = jnp.take_along_axis(planes, index.reshape(n, c, -1), axis=2).reshape(index.shape)
    return values, index.astype(jax.dtypes.canonicalize_dtype(np.int64))


def _fractional_max_pool(nd: int, input, kernel_size, output_size, output_ratio, _random_samples):
    fn = f"fractional_max_pool{nd}d"
    x = jnp.asarray(input)
    if output_size is None and output_ratio is None:
        raise ValueError(f"{fn} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        if nd == 2 and len(output_ratio) > 2:
            raise ValueError(f"{fn} requires output_ratio to either be a single Int or tuple of Ints.")
        ratio = _ntuple(output_ratio, nd)
        output_size = [int(_size(x, i - nd) * ratio[i]) for i in range(nd)]
    if _random_samples is None:
        n_batch = 1 if x.ndim == nd + 1 else _size(x, 0)
        samples = _draw(x, (n_batch, _size(x, -nd - 1), nd))
    else:
        samples = jnp.asarray(_random_samples)
    # torch's CPU autocast runs both kernels in float32 (jax_impl.amp.FP32).
    x, samples = amp.cast_inputs(fn, x, samples)
    kernel = _int_list(kernel_size, nd, "kernel_size", fn)
    out = _int_list(output_size, nd, "output_size", fn)
    _meta_checks(nd, x, kernel, out)
    _sample_checks(nd, x, samples)
    unbatched = x.ndim == nd + 1
    xb = x[None] if unbatched else x
    if xb.size == 0 or math.prod(out) == 0:
        empty = jnp.zeros(xb.shape[:2] + tuple(out), x.dtype)
        values, index = empty, empty.astype(jax.dtypes.canonicalize_dtype(np.int64))
    else:
        if min(kernel) < 1:
            # torch scans empty windows: -inf at an index that can lie past the plane.
            raise NotImplementedError(f"{fn} with kernel_size {kernel}: windows of size < 1")
        values, index = _pool(xb, samples, kernel, out)
    return (values[0], index[0]) if unbatched else (values, index)


def fractional_max_pool2d_with_indices(input: jax.Array, kernel_size, output_size=None, output_ratio=None,
                                       return_indices: bool = False, _random_samples=None):
    """``torch.nn.functional.fractional_max_pool2d_with_indices``: ``(values, indices)``.

    Args:
      input: ``(N, C, H, W)`` or ``(C, H, W)``.
      kernel_size: ``k`` or ``(kH, kW)``.
      output_size: ``oH`` or ``(oH, oW)``; needs ``oH + kH - 1 <= H`` (and for the width).
      output_ratio: ``(rH, rW)`` instead of ``output_size``: ``oH = int(H * rH)``.
      return_indices: ignored here (both are returned), as in torch.
      _random_samples: ``(N, C, 2)`` in ``input``'s dtype, ``[..., 0]`` placing the
        width windows and ``[..., 1]`` the height ones; ``None`` draws torch's
        ``rand(N, C, 2)`` from the global stream.

    Returns:
      ``(values, indices)``, indices flat in each input plane (``h * W + w``),
      int64 under x64 (int32 otherwise).
    """
    return _fractional_max_pool(2, input, kernel_size, output_size, output_ratio, _random_samples)


def fractional_max_pool2d(input: jax.Array, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples=None):
    """``torch.nn.functional.fractional_max_pool2d``: max over ``kH x kW`` windows at pseudo-random starts.

    Window ``i`` of an axis of length ``L`` with ``O`` outputs starts at
    ``int((i + u) * alpha) - int(u * alpha)``, ``alpha = (L - K) / (O - 1)``,
    the last at ``L - K``. Returns ``values``, or ``(values, indices)`` with
    ``return_indices=True`` (see :func:`fractional_max_pool2d_with_indices`).
    """
    values, index = _fractional_max_pool(2, input, kernel_size, output_size, output_ratio, _random_samples)
    return (values, index) if return_indices else values


def fractional_max_pool3d_with_indices(input: jax.Array, kernel_size, output_size=None, output_ratio=None,
                                       return_indices: bool = False, _random_samples=None):
    """``torch.nn.functional.fractional_max_pool3d_with_indices``: ``(values, indices)``.

    Args:
      input: ``(N, C, T, H, W)`` or ``(C, T, H, W)``.
      kernel_size: ``k`` or ``(kT, kH, kW)``.
      output_size: ``o`` or ``(oT, oH, oW)``; needs ``oT + kT - 1 < T`` (strictly, as
        torch's 3-d kernel checks; likewise for the height and width).
      output_ratio: ``r`` or ``(rT, rH, rW)`` instead of ``output_size``.
      return_indices: ignored here (both are returned), as in torch.
      _random_samples: ``(N, C, 3)`` in ``input``'s dtype (time, height, width);
        ``None`` draws torch's ``rand(N, C, 3)`` from the global stream.

    Returns:
      ``(values, indices)``, indices flat in each input volume (``(t * H + h) * W + w``).
    """
    return _fractional_max_pool(3, input, kernel_size, output_size, output_ratio, _random_samples)


def fractional_max_pool3d(input: jax.Array, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples=None):
    """``torch.nn.functional.fractional_max_pool3d``: max over ``kT x kH x kW`` windows at pseudo-random starts.

    Window starts per axis as :func:`fractional_max_pool2d`. Returns ``values``,
    or ``(values, indices)`` with ``return_indices=True``.
    """
    values, index = _fractional_max_pool(3, input, kernel_size, output_size, output_ratio, _random_samples)
    return (values, index) if return_indices else values
