"""``torch.sum`` of a contiguous 1-D float64/float32 CPU tensor, bit for bit, in NumPy.

``torch.optim.LBFGS`` sizes its first step by ``flat_grad.abs().sum()``. ATen
sums a contiguous float vector with ``cascade_sum`` (``cpu/SumKernel.cpp``),
in the vector's dtype (float32 sums stay float32), the same order as
:func:`jax_impl.cpu_reductions.sum_rows` follows on device:

- ``n < L`` (``L`` = 8 float32 / 4 float64 lanes: ``sum_stub`` is an AVX2
  kernel on AVX-512 CPUs too): ``row_sum`` of the scalars;
- otherwise ``row_sum`` of the ``n // L`` vectors, lane by lane; then the
  ``n % L`` leftover elements added in order from 0, then the ``L`` lanes in
  order;
- ``row_sum`` of ``m`` terms: four interleaved accumulators (term ``4 i + k``
  into accumulator ``k``), each ``multi_row_sum``'s 4-level cascade: sequential
  blocks of ``2**max(4, ceil_log2(m // 4) // 4)`` terms, whose sums are added
  into level 1, flushed into level 2 (and 2 into 3) every block-size
  additions; the leftover terms of the cascade from 0, then levels 1, 2 and 3
  added to them; then the ``m % 4`` terms left over into the first accumulator,
  then accumulators 1, 2, 3 into it.

Vectors of 32768 elements or more are split across torch's intra-op threads by
``parallel_for`` and are not reproduced: :func:`torch_sum` returns NumPy's sum
there.
"""

from __future__ import annotations

import numpy as np

__all__ = ["torch_sum"]

GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE: from this length on, ATen's sum splits across threads


def _sequential(terms: np.ndarray) -> np.ndarray:
    """``((0 + t[0]) + t[1]) + ...`` along axis 0, in order (cumulative sums are sequential by definition)."""
    if terms.shape[0] == 0:
        return np.zeros(terms.shape[1:], terms.dtype)
    return np.cumsum(terms, axis=0, dtype=terms.dtype)[-1]


def _cascade(rows: np.ndarray) -> np.ndarray:
    """ATen's ``multi_row_sum`` over axis 0 of ``rows``."""
    size = rows.shape[0]
    ceil_log2 = 1 if size <= 2 else (size - 1).bit_length()
    step = 1 << max(4, ceil_log2 // 4)
    chunks = size // step
    level = _sequential(np.moveaxis(rows[:chunks * step].reshape(chunks, step, *rows.shape[1:]), 1, 0)) \
        if chunks else rows[:0]
    partials = []
    for _ in range(2):  # levels 1 and 2 flush into the next level every ``step`` additions
        full = level.shape[0] // step
        partials.append(_sequential(level[full * step:]))
        level = _sequential(np.moveaxis(level[:full * step].reshape(full, step, *level.shape[1:]), 1, 0)) \
            if full else level[:0]
    acc = _sequential(rows[chunks * step:])
    for part in (*partials, _sequential(level)):  # level 3 never flushes
        acc = acc + part
    return acc


def _row_sum(terms: np.ndarray) -> np.ndarray:
    """ATen's ``row_sum`` along axis 0: four interleaved cascades, leftovers into the first, then combined."""
    size = terms.shape[0]
    quads = size // 4
    partial = _cascade(terms[:quads * 4].reshape(quads, 4, *terms.shape[1:]))
    first = partial[0]
    for i in range(quads * 4, size):
        first = first + terms[i]
    for k in range(1, 4):
        first = first + partial[k]
    return first


def torch_sum(x: np.ndarray):
    """``x.sum()`` of a 1-D float64 or float32 array as torch computes it on an x86 CPU (see the module docstring).

    Returns:
      A NumPy scalar of ``x``'s dtype; NumPy's own sum for other dtypes and for 32768 elements or more.
    """
    x = np.ascontiguousarray(x)
    dtype = x.dtype.type
    if x.ndim != 1 or dtype not in (np.float32, np.float64) or x.size >= GRAIN_SIZE:
        return x.sum()
    with np.errstate(all="ignore"):  # inf - inf and overflow are torch's results too
        lanes = 32 // x.itemsize
        n = x.size
        if n < lanes:
            return dtype(_row_sum(x))
        vectors = n // lanes
        acc = _row_sum(x[:vectors * lanes].reshape(vectors, lanes))
        total = dtype(0)
        for k in range(vectors * lanes, n):
            total = total + x[k]
        for k in range(lanes):
            total = total + acc[k]
        return dtype(total)
