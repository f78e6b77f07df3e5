"""Max pooling as elementwise maxima of strided views, with torch's gradient routing.

torch's CPU max-pool kernels (aten/src/ATen/native/cpu/MaxPoolKernel.cpp) scan
each window in row-major order and keep ``val > maxval or isnan(val)``; the
backward adds each output's gradient to the input element so chosen, looping
over the outputs of a plane in row-major order:

- the **first** maximum of a window takes its gradient (ties);
- a window holding NaN gives NaN and routes to its **last** NaN;
- a window of only ``-inf`` routes to its first in-bounds element;
- where windows overlap, an input element chosen by several windows receives
  ``((0 + g_a) + g_b) + ...`` in the outputs' row-major order.

Here the forward is the elementwise maximum of the ``prod(kernel)`` strided
views of the ``-inf``-padded input (one fused loop on XLA:CPU). The derivative
is a ``custom_jvp`` (forward mode works too): one scan of the input, kept in
memory (``_materialize.computed_once``), records each window's chosen offset,
and the tangent selects that view's tangent. jax transposes it into

- for windows that tile the input (stride == kernel, no padding: LeNet's
  2x2/2), one elementwise select in the input's shape;
- otherwise (overlapping, padded or dilated windows) one term per stride
  phase shift (:func:`_phase_tangent`), each a select of the upsampled
  gradient in the input's shape, accumulated from the earliest window to the
  latest: for any input element that is exactly the outputs' row-major
  order, so the gradient is torch's bit for bit, the sign of zero included (a
  never-selecting term adds torch's initial ``+0``, as long as the input is
  traced, as in a train step).

``lax.reduce_window`` is not used: XLA:CPU lowers its gradient to a
variadic reduce-window carrying one int32 index array per dimension plus a
scatter, which measured most of a LeNet train step.

A dilated window holding only padding gives ``-inf`` and no gradient; torch's
CPU backward adds that gradient at an index past the input plane.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.nn._materialize import computed_once, runtime_false

__all__ = ["window_max"]


def _views(xp, kernel, stride, dilation, out):
    """The strided view of the padded input for each window offset, in row-major order."""
    views = []
    for offset in np.ndindex(*kernel):
        start = (0, 0) + tuple(o * d for o, d in zip(offset, dilation))
        limit = xp.shape[:2] + tuple(st + (n - 1) * s + 1 for st, n, s in zip(start[2:], out, stride))
        views.append(lax.slice(xp, start, limit, (1, 1) + stride))
    return views


def _valid_masks(length_shape, kernel, stride, lows, dilation, out):
    """Per offset, a static ``out``-shaped mask of windows whose element lies inside the input (None if all do)."""
    masks = []
    for offset in np.ndindex(*kernel):
        ok = np.ones((), bool)
        for n, o, s, lo, d, k in zip(length_shape, out, stride, lows, dilation, offset):
            pos = np.arange(o) * s - lo + k * d
            axis_ok = (pos >= 0) & (pos < n)
            ok = np.logical_and.outer(ok, axis_ok) if ok.ndim else axis_ok
        masks.append(None if ok.all() else ok)
    return masks


def _pad_value(dtype):
    return np.array(-np.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min, dtype)


def _forward(x, kernel, stride, pads, dilation, out):
    xp = lax.pad(x, _pad_value(x.dtype), [(0, 0, 0), (0, 0, 0)] + [(lo, hi, 0) for lo, hi in pads])
    views = _views(xp, kernel, stride, dilation, out)
    # Elementwise maxima (NaN-propagating), not a reduction over a stacked axis:
    # XLA:CPU's vectorised max reduction dropped NaN on 6-D stacks (jaxlib 0.10.2).
    y = views[0]
    for v in views[1:]:
        y = lax.max(y, v)
    return y, views


@partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4, 5))
def window_max(x, kernel, stride, pads, dilation, out):
    """torch's max pool of ``x`` (N, C, *S): ``pads`` are ``(lo, hi)`` per spatial axis, ``hi`` >= 0,
    chosen so that exactly ``out`` windows exist."""
    return _forward(x, kernel, stride, pads, dilation, out)[0]


def _choice(views, y, masks):
    """Per window, the offset (row-major index into the kernel) of the element torch routes the
    gradient to: the first maximum (in-bounds only: padding is -inf too) or, in a window holding
    NaN, the last NaN (padding is never NaN)."""
    k = len(views)
    first = jnp.full(y.shape, k, jnp.int32)
    for t in reversed(range(k)):
        hit = views[t] == y
        if masks[t] is not None:
            hit = hit & masks[t]
        first = jnp.where(hit, jnp.int32(t), first)
    last = jnp.full(y.shape, k, jnp.int32)
    for t in range(k):
        last = jnp.where(jnp.isnan(views[t]), jnp.int32(t), last)
    return jnp.where(jnp.isnan(y), last, first)


def _tiles(kernel, stride, pads, dilation, x_shape, out) -> bool:
    """Windows that tile the input exactly (LeNet's 2x2/2 pools): every element in one window."""
    return (tuple(kernel) == tuple(stride) and all(d == 1 for d in dilation)
            and all(p == (0, 0) for p in pads) and tuple(x_shape[2:]) == tuple(o * k for o, k in zip(out, kernel)))


@window_max.defjvp
def _window_max_jvp(kernel, stride, pads, dilation, out, primals, tangents):
    (x,), (dx,) = primals, tangents
    masks = _valid_masks(x.shape[2:], kernel, stride, [lo for lo, _ in pads], dilation, out)

    def scan(x):
        y, views = _forward(x, kernel, stride, pads, dilation, out)
        return y, _choice(views, y, masks)

    # One pass over the input gives the maxima and each window's chosen offset, kept in memory:
    # fused into the gradient instead, the scan would be redone for every offset read.
    y, choice = computed_once(scan, x, x)
    zero = jnp.zeros((), x.dtype)
    never = runtime_false(x)
    if _tiles(kernel, stride, pads, dilation, x.shape, out):
        # Tiled windows: the tangent is a masked sum over each window, the mask built in the
        # input's own shape (each window's choice repeated over its elements, compared with the
        # element's offset in its window). Its transpose is then one elementwise select in the
        # input's shape, g (upsampled) where chosen else 0: built on the (N, C, O1, K1, O2, K2, ...)
        # split instead, XLA:CPU emitted it as a scalar loop over the innermost K (measured
        # ~5x slower for LeNet's 2x2 pool gradient). The second, never selecting term
        # transposes to "+ 0", torch's `grad_input[i] += g` on zeros (-0 -> +0).
        nd = len(kernel)
        split = x.shape[:2] + tuple(v for o, k in zip(out, kernel) for v in (o, k))
        win = tuple(3 + 2 * i for i in range(nd))
        offset = np.arange(int(np.prod(kernel)), dtype=np.int32).reshape(kernel)
        offset = offset.reshape(tuple(v for k in kernel for v in (1, k)))  # (1, K1, 1, K2, ...)
        offset = np.broadcast_to(offset, split[2:]).reshape(x.shape[2:])
        chosen = choice
        for axis, k in enumerate(kernel, start=2):
            chosen = jnp.repeat(chosen, k, axis=axis)
        selected = jnp.where(chosen == offset, dx, zero) + jnp.where(never, dx, zero)
        dy = jnp.sum(selected.reshape(split), axis=win)
        return y, dy
    return y, _phase_tangent(dx, choice, kernel, stride, pads, dilation, out, never)


def _phase_tangent(dx, choice, kernel, stride, pads, dilation, out, never):
    """The tangent of overlapping (or strided, padded, dilated) windows, by stride phase.

    The padded input is cut into blocks of ``stride`` elements per axis; the
    element at tap ``k`` of window ``o`` lies in block ``o + (d*k) // s`` at
    phase ``(d*k) % s``. For each block shift ``m`` (``0 <= m <= d*(K-1)//s``
    per axis) one term selects, in the input's own shape, the elements that
    are their window's choice for the window ``m`` blocks back, sums each
    block (at most one such element) and shifts the block grid by ``m``. Its
    transpose is a select of the upsampled, shifted gradient in the input's
    shape, which XLA:CPU vectorises (the transposes of the strided views, a
    sum of interior-padded arrays, ran as scalar loops, measured ~1.5x slower
    for ResNet-18's 3x3/2 stem pool; the same bits).
    Terms come in increasing ``m``, after the never-selecting one: the
    transpose adds them in the reverse order, the earliest window (largest
    ``m``) first and ``+0`` last, which is torch's row-major order of the
    outputs for every input element.
    """
    nd = len(kernel)
    zero = jnp.zeros((), dx.dtype)
    reach = [(d * (k - 1)) // s for k, s, d in zip(kernel, stride, dilation)]
    blocks = [o + r for o, r in zip(out, reach)]
    size = [b * s for b, s in zip(blocks, stride)]
    dxp = lax.pad(dx, zero, [(0, 0, 0), (0, 0, 0)] + [(lo, sz - n - lo, 0) for (lo, _), sz, n in zip(pads, size, dx.shape[2:])])
    split = dx.shape[:2] + tuple(v for b, s in zip(blocks, stride) for v in (b, s))
    win = tuple(3 + 2 * i for i in range(nd))
    spatial = tuple(range(2, dx.ndim))
    dy = jnp.sum(jnp.where(never, dx, zero), axis=spatial, keepdims=True)
    for shift in np.ndindex(*[r + 1 for r in reach]):
        # Per axis, the tap at each phase of a block `shift` blocks after its window's first (-1: none).
        taps = []
        for m, k, s, d in zip(shift, kernel, stride, dilation):
            tap = np.full(s, -1)
            for kk in range(k):
                if (d * kk) // s == m:
                    tap[(d * kk) % s] = kk
            taps.append(tap)
        if any((t < 0).all() for t in taps):
            continue
        grids = np.meshgrid(*[np.tile(t, b) for t, b in zip(taps, blocks)], indexing="ij")
        valid = np.all([g >= 0 for g in grids], axis=0)
        pattern = np.where(valid, np.ravel_multi_index(np.where(valid, grids, 0), kernel), -1).astype(np.int32)
        chosen = lax.pad(choice, np.int32(-2), [(0, 0, 0), (0, 0, 0)] + [(m, b - o - m, 0) for m, b, o in zip(shift, blocks, out)])
        for axis, s in enumerate(stride, start=2):
            chosen = jnp.repeat(chosen, s, axis=axis)
        term = jnp.sum(jnp.where(chosen == pattern, dxp, zero).reshape(split), axis=win)
        term = lax.slice(term, (0, 0) + tuple(shift), term.shape[:2] + tuple(m + o for m, o in zip(shift, out)))
        dy = dy + term
    return dy
