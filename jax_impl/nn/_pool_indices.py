"""Max pooling that also returns torch's indices (``return_indices=True``).

torch's CPU max-pool kernels (aten/src/ATen/native/cpu/MaxPoolKernel.cpp,
AdaptiveMaxPoolKernel.cpp) scan each window in row-major order starting from
its first in-bounds element with ``maxval = -inf`` and
``maxindex = first in-bounds position``, and replace the running maximum when
``val > maxval or isnan(val)``. So:

- the index of the **first** maximum wins ties;
- a window holding NaN returns NaN and the index of its **last** NaN;
- a window of only ``-inf`` returns the index of its first in-bounds element.

Indices are flat offsets into the input's spatial plane (``h * W + w`` in 2-D),
per (batch, channel), as torch returns them. The gradient flows to the chosen
element only, as torch's backward scatters to the index.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _gather_windows(x, tables):
    """Gather ``x[..., idx]`` per spatial axis; returns windows ``(N, C, *O, prod(K))`` and validity."""
    nd = len(tables)
    valid = np.ones((), bool)
    for axis, (idx, ok) in enumerate(tables, start=2):
        # Replace spatial axis ``axis`` (now at position 2 + 2*(axis-2)) by (O, K).
        pos = 2 + 2 * (axis - 2)
        x = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=pos)
        x = x.reshape(x.shape[:pos] + idx.shape + x.shape[pos + 1:])
        valid = np.logical_and.outer(valid, ok) if valid.ndim else ok
    # x: (N, C, O1, K1, O2, K2, ...) -> (N, C, O1, O2, ..., K1, K2, ...)
    o_axes = [2 + 2 * i for i in range(nd)]
    k_axes = [3 + 2 * i for i in range(nd)]
    x = jnp.transpose(x, (0, 1, *o_axes, *k_axes))
    out_shape = x.shape[: 2 + nd]
    x = x.reshape(*out_shape, -1)
    # valid: (O1, K1, O2, K2, ...) -> (O1, O2, ..., K1*K2*...)
    valid = np.transpose(valid, (*[2 * i for i in range(nd)], *[2 * i + 1 for i in range(nd)]))
    valid = valid.reshape(*out_shape[2:], -1)
    return x, valid


def window_max_with_indices(x, tables, spatial_shape):
    """Max over index windows with torch's tie and NaN rules.

    Args:
      x: batched input ``(N, C, *S)``.
      tables: per spatial axis ``(idx, valid)``, both ``(O, K)`` numpy arrays; ``idx``
        holds in-range input positions (clipped where ``valid`` is False).
      spatial_shape: ``S``, to flatten positions into torch's indices.

    Returns:
      ``(values, indices)`` with shape ``(N, C, *O)``; indices are int64 under
      x64, int32 otherwise.
    """
    windows, valid = _gather_windows(x, tables)
    neg_inf = jnp.array(-jnp.inf, x.dtype)
    masked = jnp.where(valid, windows, neg_inf)
    # XLA:CPU's vectorised max reduction can drop NaN (seen on 6-D inputs with
    # jaxlib 0.10.2): detect NaN windows separately instead of relying on max.
    is_nan = jnp.any(jnp.isnan(masked), axis=-1, keepdims=True)
    m = jnp.max(masked, axis=-1, keepdims=True)
    hit = jnp.where(is_nan, jnp.isnan(masked), masked == m) & valid
    k = hit.shape[-1]
    first = jnp.argmax(hit, axis=-1)
    last = k - 1 - jnp.argmax(hit[..., ::-1], axis=-1)
    # A window of only -inf: `masked == m` holds at every valid slot, so `first`
    # is already the first in-bounds element, as torch returns.
    choice = jnp.where(is_nan[..., 0], last, first)
    values = jnp.take_along_axis(windows, choice[..., None], axis=-1)[..., 0]

    # Flat input position of the chosen slot.
    nd = len(tables)
    k_shape = tuple(t[0].shape[1] for t in tables)
    k_coords = jnp.unravel_index(choice, k_shape)
    flat = jnp.zeros(choice.shape, jax.dtypes.canonicalize_dtype(np.int64))
    for axis, ((idx, _), kc) in enumerate(zip(tables, k_coords)):
        # Broadcast the (O, K) table over the other output axes.
        shape = [1] * nd
        shape[axis] = idx.shape[0]
        o_idx = jnp.arange(idx.shape[0]).reshape(shape)
        pos = jnp.asarray(idx)[o_idx, kc]
        flat = flat * spatial_shape[axis] + pos.astype(flat.dtype)
    return values, flat


def pool_tables(length, out, k, s, p, d):
    """``(idx, valid)`` for a strided, padded, dilated window along one axis."""
    pos = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    valid = (pos >= 0) & (pos < length)
    return np.clip(pos, 0, length - 1), valid


def adaptive_tables(length, out, bins):
    """``(idx, valid)`` for adaptive bins ``[(lo, hi), ...]`` along one axis."""
    k = max(hi - lo for lo, hi in bins)
    lo = np.array([b[0] for b in bins])[:, None]
    hi = np.array([b[1] for b in bins])[:, None]
    pos = lo + np.arange(k)[None, :]
    valid = pos < hi
    return np.clip(pos, 0, length - 1), valid
