"""torch's CPU order among equal values in ``sort(stable=False)``, ``argsort`` and ``topk``.

torch's CPU kernels (``aten/src/ATen/native/cpu/SortingKernel.cpp``, ``TopKImpl.h``) order ``(value, index)``
pairs with libstdc++'s algorithms and a comparator on the value alone (NaN above every number, ``-0.0``
equal to ``0.0``), so the order among equal values is the algorithm's, not the input's:

* ``sort(stable=False)`` is ``std::sort`` (introsort: median-of-three pivot, an unguarded Hoare partition,
  heapsort past ``2 * floor(log2(n))`` levels, insertion sort below 16 elements), except a 1-D integer
  tensor sorted ascending with at least 32768 elements, which fbgemm's radix sort orders stably;
* ``topk`` is ``std::partial_sort`` (a heap select, then a heap sort) when ``k * 64 <= n``, else
  ``std::nth_element`` (introselect) for the ``k``-th and, with ``sorted=True``, ``std::sort`` of the
  ``k - 1`` before it (with ``sorted=False`` those stay in introselect's order).

The functions here replay those algorithms on the host (plain Python on a list of ``(rank, index)``
pairs: integer ranks compare as the kernel's comparator compares the values), which makes the indices
torch's bit for bit, gradient routing included, since values are gathered at the returned indices. A slice
without ties takes the stable order (no algorithm can reorder distinct values), and so does any slice of
at most 16 elements under ``std::sort`` (insertion sort is stable). From JAX they run through
``jax.pure_callback``, so they work under ``jit`` and ``vmap`` (the host call stalls the device).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "argsort", "cpu_sort_order", "cpu_topk_order", "nth_element", "partial_sort", "std_sort", "topk_indices",
]

_S_THRESHOLD = 16  # libstdc++'s _S_threshold: introsort leaves runs this short to the final insertion sort
_RADIX_MIN_NUMEL = 32768  # at::internal::GRAIN_SIZE: fbgemm's radix sort takes 1-D integer tensors this long
_PARTIAL_SORT_RATIO = 64  # TopKImpl.h: std::partial_sort when k * 64 <= n, else std::nth_element


def _lg(n: int) -> int:
    return n.bit_length() - 1


def _move_median_to_first(a: list, result: int, x: int, y: int, z: int) -> None:
    ax, ay, az = a[x][0], a[y][0], a[z][0]
    if ax < ay:
        median = y if ay < az else (z if ax < az else x)
    elif ax < az:
        median = x
    else:
        median = z if ay < az else y
    a[result], a[median] = a[median], a[result]


def _unguarded_partition(a: list, first: int, last: int, pivot: int) -> int:
    p = a[pivot][0]
    while True:
        while a[first][0] < p:
            first += 1
        last -= 1
        while p < a[last][0]:
            last -= 1
        if not first < last:
            return first
        a[first], a[last] = a[last], a[first]
        first += 1


def _unguarded_partition_pivot(a: list, first: int, last: int) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(a, first, first + 1, mid, last - 1)
    return _unguarded_partition(a, first + 1, last, first)


def _push_heap(a: list, first: int, hole: int, top: int, value: tuple) -> None:
    parent = (hole - 1) // 2
    while hole > top and a[first + parent][0] < value[0]:
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = value


def _adjust_heap(a: list, first: int, hole: int, length: int, value: tuple) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if a[first + child][0] < a[first + child - 1][0]:
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if length & 1 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    _push_heap(a, first, hole, top, value)


def _make_heap(a: list, first: int, last: int) -> None:
    length = last - first
    if length < 2:
        return
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(a, first, parent, length, a[first + parent])


def _pop_heap(a: list, first: int, last: int, result: int) -> None:
    value = a[result]
    a[result] = a[first]
    _adjust_heap(a, first, 0, last - first, value)


def _heap_select(a: list, first: int, middle: int, last: int) -> None:
    _make_heap(a, first, middle)
    for i in range(middle, last):
        if a[i][0] < a[first][0]:
            _pop_heap(a, first, middle, i)


def partial_sort(a: list, first: int, middle: int, last: int) -> None:
    """``std::partial_sort`` of ``a[first:last]`` (a list of ``(key, payload)``, ordered by ``key <``):
    ``__heap_select`` then ``__sort_heap``."""
    _heap_select(a, first, middle, last)
    while middle - first > 1:
        middle -= 1
        _pop_heap(a, first, middle, middle)


def _unguarded_linear_insert(a: list, last: int) -> None:
    value = a[last]
    prev = last - 1
    while value[0] < a[prev][0]:
        a[last] = a[prev]
        last = prev
        prev -= 1
    a[last] = value


def _insertion_sort(a: list, first: int, last: int) -> None:
    for i in range(first + 1, last):
        if a[i][0] < a[first][0]:
            value = a[i]
            a[first + 1:i + 1] = a[first:i]
            a[first] = value
        else:
            _unguarded_linear_insert(a, i)


def _introsort_loop(a: list, first: int, last: int, depth: int) -> None:
    while last - first > _S_THRESHOLD:
        if depth == 0:
            partial_sort(a, first, last, last)
            return
        depth -= 1
        cut = _unguarded_partition_pivot(a, first, last)
        _introsort_loop(a, cut, last, depth)
        last = cut


def std_sort(a: list, first: int, last: int) -> None:
    """``std::sort`` of ``a[first:last]`` (a list of ``(key, payload)``, ordered by ``key <``): introsort,
    then ``__final_insertion_sort``."""
    if last - first < 2:
        return
    _introsort_loop(a, first, last, _lg(last - first) * 2)
    if last - first > _S_THRESHOLD:
        _insertion_sort(a, first, first + _S_THRESHOLD)
        for i in range(first + _S_THRESHOLD, last):
            _unguarded_linear_insert(a, i)
    else:
        _insertion_sort(a, first, last)


def nth_element(a: list, first: int, nth: int, last: int) -> None:
    """``std::nth_element`` on ``a[first:last]`` (a list of ``(key, payload)``, ordered by ``key <``):
    ``__introselect`` (heap select past ``2 * floor(log2(n))`` partitions)."""
    if first == last or nth == last:
        return
    depth = _lg(last - first) * 2
    while last - first > 3:
        if depth == 0:
            _heap_select(a, first, nth + 1, last)
            a[first], a[nth] = a[nth], a[first]
            return
        depth -= 1
        cut = _unguarded_partition_pivot(a, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(a, first, last)


def _keys(values: np.ndarray, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys along the last axis that compare as torch's comparator compares the values, and
    whether each slice has a tie.

    Equal values (``-0.0`` and ``0.0``, every NaN) share a dense rank, NaN the highest; descending order
    negates it, so ``key_x < key_y`` is ``KeyValueCompDesc``/``KeyValueCompAsc`` (and topk's lambdas).
    """
    if values.dtype.kind == "b":
        values = values.astype(np.int8)
    elif values.dtype.kind not in "iu" and values.dtype != np.float64:
        values = values.astype(np.float32)  # float16/bfloat16 widen exactly; numpy sorts them as floats
    order = np.argsort(values, axis=-1, kind="stable")  # NaN last, as the comparator places it
    ordered = np.take_along_axis(values, order, axis=-1)
    same = ordered[..., 1:] == ordered[..., :-1]
    if values.dtype.kind == "f":
        same |= np.isnan(ordered[..., 1:]) & np.isnan(ordered[..., :-1])
    ranks = np.empty(values.shape, np.int64)
    np.put_along_axis(ranks, order, np.cumsum(np.concatenate([np.zeros(same.shape[:-1] + (1,), bool), ~same], -1),
                                              axis=-1), axis=-1)
    return (-ranks if descending else ranks), same.any(axis=-1)


def _run(keys: np.ndarray, algorithm) -> np.ndarray:
    pairs = list(zip(keys.tolist(), range(keys.shape[0])))
    return np.fromiter((i for _, i in algorithm(pairs)), np.int64, count=-1)


def cpu_sort_order(values: np.ndarray, descending: bool = False, stable: bool = False,
                   radix: bool = False) -> np.ndarray:
    """torch's CPU ``sort`` indices along the last axis of a NumPy array.

    ``stable=True`` (``std::stable_sort``) and ``radix=True`` (fbgemm's radix sort: the caller's tensor is
    1-D, integer, ascending and at least 32768 long) give the stable order; otherwise ``std::sort``'s.
    """
    values = np.asarray(values)
    if values.shape[-1] == 0:
        return np.zeros(values.shape, np.int64)
    keys, tied = _keys(values, descending)
    order = np.argsort(keys, axis=-1, kind="stable")
    if stable or radix or values.shape[-1] <= _S_THRESHOLD:
        return order

    def whole(pairs):
        std_sort(pairs, 0, len(pairs))
        return pairs

    rows_keys, rows_order = keys.reshape(-1, keys.shape[-1]), order.reshape(-1, keys.shape[-1])  # views
    for row in np.flatnonzero(tied.reshape(-1)):
        rows_order[row] = _run(rows_keys[row], whole)
    return order


def cpu_topk_order(values: np.ndarray, k: int, largest: bool = True, sorted: bool = True) -> np.ndarray:  # noqa: A002
    """torch's CPU ``topk`` indices along the last axis of a NumPy array (``topk_impl_loop``).

    With ``k * 64 <= n`` it is ``std::partial_sort`` of the first ``k``; otherwise ``std::nth_element`` at
    ``k - 1`` and, if ``sorted``, ``std::sort`` of the first ``k - 1``.
    """
    values = np.asarray(values)
    n = values.shape[-1]
    if k == 0:
        return np.zeros(values.shape[:-1] + (0,), np.int64)
    keys, tied = _keys(values, largest)
    order = np.ascontiguousarray(np.argsort(keys, axis=-1, kind="stable")[..., :k])
    partial = k * _PARTIAL_SORT_RATIO <= n

    def select(pairs):
        if partial:
            partial_sort(pairs, 0, k, n)
        else:
            nth_element(pairs, 0, k - 1, n)
            if sorted:
                std_sort(pairs, 0, k - 1)
        return pairs[:k]

    # without ties every algorithm gives the sorted order, except nth_element's unsorted front
    rows = tied.reshape(-1) | (not partial and not sorted)
    rows_keys, rows_order = keys.reshape(-1, n), order.reshape(-1, k)  # views: rows written in place
    for row in np.flatnonzero(rows):
        rows_order[row] = _run(rows_keys[row], select)
    return order


def _index_dtype():
    """``jnp.argsort``'s index dtype: int64 under x64, else int32."""
    return jax.dtypes.canonicalize_dtype(jnp.int64)


@functools.lru_cache(maxsize=256)
def _callback(fn, args: tuple, index_dtype):
    """The host function ``fn(x, *args)`` as ``index_dtype``: one function object per arguments, since jax
    compiles a callback run outside ``jit`` once per function (a new one each call would compile each call)."""
    def run(x):
        return fn(np.asarray(x), *args).astype(index_dtype)

    return run


def _host_call(fn, args: tuple, input, dim: int, size: int):
    """``fn(slices, *args)`` on the host along ``dim`` of ``input`` (moved last), giving ``size`` indices per
    slice.

    A concrete input is sorted here, in the calling thread: an eager ``jax.pure_callback`` may run on one of
    XLA's threads, where a ``jax.enable_x64()`` context of the caller's thread does not hold, and there jax
    converts its float64 operand to float32 and its int64 result to int32 (rounded values, or a dtype
    error). A traced input goes through the callback.
    """
    index_dtype = _index_dtype()
    if not isinstance(input, jax.core.Tracer):
        moved = np.ascontiguousarray(np.moveaxis(np.asarray(input), dim, -1))
        return jnp.moveaxis(jnp.asarray(fn(moved, *args).astype(index_dtype)), -1, dim)
    moved = jnp.moveaxis(jax.lax.stop_gradient(input), dim, -1)
    shape = jax.ShapeDtypeStruct(moved.shape[:-1] + (size,), index_dtype)
    out = jax.pure_callback(_callback(fn, args, np.dtype(index_dtype)), shape, moved, vmap_method="expand_dims")
    return jnp.moveaxis(out, -1, dim)


def argsort(input: jax.Array, dim: int = -1, descending: bool = False, stable: bool = False) -> jax.Array:
    """``torch.argsort`` with torch's CPU order among equal values (``std::sort`` unless ``stable``)."""
    if input.ndim == 0:
        return jnp.zeros((), _index_dtype())
    dim = dim % input.ndim
    if stable:
        return jnp.argsort(input, axis=dim, descending=descending, stable=True)
    radix = (input.ndim == 1 and not descending and input.shape[0] >= _RADIX_MIN_NUMEL
             and jnp.issubdtype(input.dtype, jnp.integer))
    if radix or input.shape[dim] <= _S_THRESHOLD:
        return jnp.argsort(input, axis=dim, descending=descending, stable=True)
    return _host_call(cpu_sort_order, (bool(descending),), input, dim, input.shape[dim])


def topk_indices(input: jax.Array, k: int, dim: int = -1, largest: bool = True,
                 sorted: bool = True) -> jax.Array:  # noqa: A002 - torch's name
    """``torch.topk(...).indices`` with torch's CPU order among equal values; ``dim`` of a 0-d input is 0."""
    if input.dtype == jnp.bool_:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    if not 0 <= k <= (input.shape[dim] if input.ndim else 1):
        raise RuntimeError("selected index k out of range")
    if input.ndim == 0:
        return jnp.zeros((), _index_dtype())
    dim = dim % input.ndim
    return _host_call(cpu_topk_order, (int(k), bool(largest), bool(sorted)), input, dim, k)
