"""``torch.linalg.vector_norm`` over all elements, in the summation order of torch's CPU kernel.

A float32 norm is a sum of rounded terms; its value depends on the order of
the additions, and XLA's reductions add in another order than ATen's. This
module adds in ATen's order (torch 2.13, x86 CPU, float32/float64, contiguous
input), so the norms are torch's bit for bit:

- A tensor with one element (any ``ord`` but 0) is ``abs(x)``: ``linalg_vector_norm``
  returns ``abs`` when every reduced dimension has size 1 (``LinearAlgebra.cpp``).
- ``ord=2`` (``aten/src/ATen/native/cpu/ReduceOpsKernel.cpp``, the
  ``is_reduce_lastdim`` branch of ``norm_kernel_tensor_iterator_impl``): one
  ``Vectorized`` accumulator, ``acc += x * x`` over the first ``n - n % lanes``
  elements (lane ``j`` sums elements ``j, j + lanes, ...``; product and sum
  rounded separately), then ``buffer[0] + buffer[1] + ... + buffer[lanes - 1]``
  in order, then the remaining elements one by one, then ``std::sqrt``.
  ``norm_stub`` is registered with ``REGISTER_DISPATCH``, which gives AVX-512
  CPUs the AVX2 kernel (``DispatchStub.h``): 8 float32 / 4 float64 lanes.
  The compiler turns the scalar tail loop into 128-bit blocks whose products
  are rounded before the in-order additions, and the last ``rem % 4`` (float32)
  / ``rem % 2`` (float64) elements into fused multiply-adds: measured against
  torch for every size from 1 to 140 and larger ones.
- Every other ``ord`` is ``binary_kernel_reduce`` (``cpu/Reduce.h``) with the
  ``SharedReduceOps.h`` ops: ``acc = acc + f(|x|)`` element by element in the
  tensor's dtype (``NormOneOps``: ``|x|``; ``NormOps``: ``powf(|x|, p)``;
  ``NormZeroOps``: ``x != 0``), then ``project`` (``powf(acc, 1 / p)``; ``1 / p``
  rounded to the dtype). With ``n >= GRAIN_SIZE`` (32768) elements and more
  than one intra-op thread, ``parallel_for`` cuts the range into
  ``min(threads, ceil(n / GRAIN_SIZE))`` chunks of ``ceil(n / chunks)``, each
  summed from 0, and the chunk sums are added in thread order. The result
  therefore depends on ``torch.get_num_threads()``
  (:func:`set_intra_op_threads`); the ``ord=2`` kernel does not split.
- ``inf`` / ``-inf`` are the max / min of ``|x|`` (order-free).

``powf`` for ``ord`` outside ``{0, 1, 2, 0.5, inf, -inf}`` is computed in
float64 on the host (``jax.pure_callback``) and rounded to float32, which is
glibc's ``powf`` except where ``x**p`` lies within about ``2**-50`` relative of
a float32 rounding boundary. ``ord=0.5`` needs no ``powf``: ``powf(a, 0.5)`` is
the correctly rounded ``sqrt(a)`` and ``powf(s, 2)`` the rounded ``s * s``.

Sequential sums are ``lax.scan`` loops (their additions are never reassociated);
tensors of similar length share one loop, a few at a time, small enough for
XLA:CPU to compile each loop as one native loop.
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.kernels import rounded, runtime_zero_of


__all__ = ["GRAIN_SIZE", "get_intra_op_threads", "set_intra_op_threads", "vector_norm", "vector_norms"]

# at::internal::GRAIN_SIZE: the smallest range ATen's parallel_for splits across threads.
GRAIN_SIZE = 32768

_INT = {4: jnp.int32, 8: jnp.int64}

_intra_op_threads: int | None = None


def _default_threads() -> int:
    """torch's default ``get_num_threads()``: ``OMP_NUM_THREADS``, else ``MKL_NUM_THREADS``, else physical cores."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    return _physical_cores(frozenset(cpus))


@functools.lru_cache(maxsize=8)
def _physical_cores(cpus: frozenset[int]) -> int:
    """The physical cores among the logical CPUs ``cpus`` (``/proc/cpuinfo``), or their count where it cannot
    be read. Kept per CPU set: LBFGS's dot products ask for every direction they add up, and reading
    ``/proc/cpuinfo`` costs more than such a product."""
    try:
        cores, cpu = set(), None
        with open("/proc/cpuinfo") as f:
            info = {}
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "processor":
                    cpu, info = int(value), {}
                elif key in ("physical id", "core id"):
                    info[key] = value
                    if len(info) == 2 and cpu in cpus:
                        cores.add((info["physical id"], info["core id"]))
        return max(1, len(cores)) if cores else max(1, len(cpus))
    except OSError:
        return max(1, len(cpus))


def set_intra_op_threads(threads: int | None) -> None:
    """Sets the ``torch.get_num_threads()`` whose chunking the ``ord != 2`` sums reproduce.

    ``None`` (default) guesses torch's default: ``OMP_NUM_THREADS``,
    ``MKL_NUM_THREADS``, else the physical cores available. Only tensors of at
    least :data:`GRAIN_SIZE` elements depend on it.
    """
    global _intra_op_threads
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    _intra_op_threads = None if threads is None else int(threads)


def get_intra_op_threads() -> int:
    """The thread count that :func:`set_intra_op_threads` set, or torch's default on this machine."""
    return _default_threads() if _intra_op_threads is None else _intra_op_threads


# XLA:CPU compiles a while loop whose body reads few bytes into one native loop (its small-while-loop
# hoisting); a larger body runs as thunks, about a microsecond an iteration inside a train step. A scan
# unrolled 8 times over at most this many bytes of columns is hoisted (measured: 16 float32 columns
# hoisted, 25 and more not; 32 columns as two scans of 16 run 9x faster than as one).
_SCAN_ROW_BYTES = 64
_UNROLL = 8


def _scan_groups(members: list[int], blocks: list[jax.Array]) -> list[list[int]]:
    """``members`` cut, in order, into groups whose rows total at most :data:`_SCAN_ROW_BYTES`."""
    groups: list[list[int]] = []
    width = 0
    for i in members:
        row = blocks[i].shape[1] * blocks[i].dtype.itemsize
        if groups and width + row <= _SCAN_ROW_BYTES:
            groups[-1].append(i)
            width += row
        else:
            groups.append([i])
            width = row
    return groups


def _sequential_sums(blocks: list[jax.Array], squared: list[bool]) -> tuple[list[jax.Array], list[jax.Array]]:
    """``((0 + c[0]) + c[1]) + ...`` down every column of every 2-D block, each column in order.

    A block marked in ``squared`` adds the squares of its values, each
    rounded on its own (``acc + x * x`` as two vector instructions), computed
    inside the loop so the squares are never stored. Blocks are padded at the
    end with zero rows (adding +0 to a sum of terms >= 0, inf or NaN keeps
    it) and summed side by side, one scan per group of similar lengths.
    Returns one 1-D array of column sums per block, and the scans' results.
    """
    out: list[jax.Array | None] = [None] * len(blocks)
    scanned: list[jax.Array] = []
    buckets: dict[tuple[int, object], list[int]] = {}
    for i, b in enumerate(blocks):
        if b.shape[0] == 0:
            out[i] = jnp.zeros(b.shape[1:], b.dtype)
        else:
            buckets.setdefault((int(b.shape[0]).bit_length(), b.dtype), []).append(i)
    for (_, dtype), members in buckets.items():
        for group in _scan_groups(members, blocks):
            length = max(blocks[i].shape[0] for i in group)
            columns = tuple(jnp.pad(blocks[i], ((0, length - blocks[i].shape[0]), (0, 0))) for i in group)
            squares = tuple(squared[i] for i in group)

            def add_row(accs, rows, squares=squares, zero=runtime_zero_of(columns[0])):
                return tuple(acc + (rounded(row * row, zero) if square else row)
                             for acc, row, square in zip(accs, rows, squares)), None

            init = tuple(jnp.zeros(c.shape[1:], dtype) for c in columns)
            totals, _ = lax.scan(add_row, init, columns, unroll=min(_UNROLL, length))
            scanned += totals
            for i, total in zip(group, totals):
                out[i] = total
    return out, scanned  # type: ignore[return-value]


def _lanes(dtype) -> tuple[int, int]:
    """(``Vectorized<T>::size()`` of the AVX2 kernel, the compiler's block width in the scalar tail)."""
    itemsize = jnp.dtype(dtype).itemsize
    return 32 // itemsize, 16 // itemsize


def _sign_bit(total: jax.Array) -> jax.Array:
    """The sign bit of a float scalar, as an int32 0 or 1."""
    bits = lax.bitcast_convert_type(total, _INT[jnp.dtype(total.dtype).itemsize])
    return lax.shift_right_logical(bits, jnp.asarray(8 * bits.dtype.itemsize - 1, bits.dtype)).astype(jnp.int32)


def _opaque_zero(sums: list[jax.Array], xs: list[jax.Array]) -> jax.Array:
    """An int32 zero that LLVM cannot fold, the key of :func:`jax_impl.kernels.rounded`.

    The sign bit of a sum of squares or absolute values read back from a scan
    (a while loop, whose results LLVM sees only as loads): 0, or 1 for a NaN
    sum, where every result built on it is NaN anyway. Without a scan, the
    NaN count of the inputs (foldable for tiny inputs, see the module notes).
    """
    for total in sums:
        if total.size:
            return _sign_bit(total.reshape(-1)[0])
    return runtime_zero_of(jnp.concatenate([x.reshape(-1) for x in xs]))


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``s = a + b`` rounded and its exact error ``e`` (Knuth): ``s + e == a + b``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _square_exact(a: jax.Array, zero: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a * a`` rounded and its exact error (Dekker's product with Veltkamp's split)."""
    p = rounded(a * a, zero)
    c = rounded(a * (2.0 ** ((jnp.finfo(a.dtype).nmant + 2) // 2) + 1), zero)
    hi = c - (c - a)
    lo = a - hi
    # Every partial product is exact, so an FMA contraction of these lines leaves them unchanged.
    return p, (((hi * hi - p) + hi * lo) + lo * hi) + lo * lo


def _fma_square(a: jax.Array, acc: jax.Array, zero: jax.Array) -> jax.Array:
    """``fma(a, a, acc)``, one rounding, with no FMA instruction (Boldo and Melquiond's emulation).

    ``RN(th + RO(tl + ul))`` where ``uh + ul = a * a`` and ``th + tl = acc + uh``
    exactly, and ``RO`` rounds to odd (the inexact ``tl + ul`` moved to the
    neighbour with an odd last bit): one correct rounding of the exact sum.
    """
    uh, ul = _square_exact(a, zero)
    th, tl = _two_sum(acc, uh)
    v, err = _two_sum(tl, ul)
    itype = _INT[jnp.dtype(a.dtype).itemsize]
    bits = lax.bitcast_convert_type(v, itype)
    even = (bits & 1) == 0
    away = (err > 0) == (v > 0)
    odd = jnp.where(even & (err != 0), bits + jnp.where(away, 1, -1).astype(itype), bits)
    return th + lax.bitcast_convert_type(odd, v.dtype)


def _norm_two_lanes(x: jax.Array) -> jax.Array:
    """The lanes of torch's vectorised ``ord=2`` kernel: rows of one ``Vectorized`` each (squared in the scan)."""
    lanes, _ = _lanes(x.dtype)
    m = x.shape[0] - x.shape[0] % lanes
    return x[:m].reshape(-1, lanes)


def _norm_two_finish(lane_sums: jax.Array, tail: jax.Array, zero: jax.Array) -> jax.Array:
    _, block = _lanes(tail.dtype)
    acc = lane_sums[0]
    for j in range(1, lane_sums.shape[0]):
        acc = acc + lane_sums[j]
    blocked = tail.shape[0] - tail.shape[0] % block
    for i in range(tail.shape[0]):
        v = tail[i]
        # The blocked part multiplies in a vector register (rounded product); the rest is a fused multiply-add.
        acc = (acc + rounded(v * v, zero)) if i < blocked else _fma_square(v, acc, zero)
    return jnp.sqrt(acc)


def _powf(a: jax.Array, p: float) -> jax.Array:
    """glibc ``powf(a, p)`` elementwise (``pow`` for float64): float64 on the host, rounded once."""
    if p == 0.5:
        return jnp.sqrt(a)
    if p == 1.0:
        return a
    if p == 2.0:
        return a * a
    if a.dtype != jnp.float32:
        return a**p
    return jax.pure_callback(_powf_host(float(p)), jax.ShapeDtypeStruct(a.shape, a.dtype), a,
                             vmap_method="expand_dims")


@functools.lru_cache(maxsize=64)
def _powf_host(p: float):
    """:func:`_powf`'s host function, one per exponent: jax compiles a callback run outside ``jit`` once per
    function."""
    def host(v):
        return (np.asarray(v, np.float64) ** np.float64(np.float32(p))).astype(np.float32)

    return host


def _terms(a: jax.Array, p: float) -> jax.Array:
    if p == 0:
        return (a != 0).astype(a.dtype)
    return _powf(a, p)


def _chunks(n: int, threads: int) -> list[tuple[int, int]]:
    """ATen's ``parallel_for(0, n, GRAIN_SIZE)`` ranges, in thread order (one range when it does not split)."""
    if n < GRAIN_SIZE or threads == 1:
        return [(0, n)]
    count = min(threads, -(-n // GRAIN_SIZE))
    size = -(-n // count)
    return [(t * size, min(n, (t + 1) * size)) for t in range(count) if t * size < n]


def _project(acc: jax.Array, p: float) -> jax.Array:
    if p in (0.0, 1.0):
        return acc
    inverse = float(np.asarray(1.0, acc.dtype) / np.asarray(p, acc.dtype))
    return _powf(acc, inverse)


def _check_ord(ord: float, sizes: list[int]) -> None:
    if (ord < 0 or ord == math.inf) and any(n == 0 for n in sizes):
        name = ord if math.isinf(ord) or not ord.is_integer() else int(ord)
        raise RuntimeError(f"linalg.vector_norm cannot compute the {name} norm on an empty tensor because the "
                           "operation does not have an identity")


def _vector_norms(xs: tuple[jax.Array, ...], ord: float, threads: int) -> list[jax.Array]:
    flat = [jnp.asarray(x).reshape(-1) for x in xs]
    results: list[jax.Array | None] = [None] * len(flat)
    blocks: list[jax.Array] = []
    squared: list[bool] = []
    plans: list[tuple] = []
    for i, x in enumerate(flat):
        a = jnp.abs(x)
        n = x.shape[0]
        if n == 0:
            results[i] = jnp.zeros((), x.dtype)
        elif n == 1 and ord != 0:
            results[i] = a[0]
        elif ord == math.inf:
            results[i] = jnp.max(a)
        elif ord == -math.inf:
            results[i] = jnp.min(a)
        elif ord == 2 and x.dtype in (jnp.float32, jnp.float64):
            lanes = _norm_two_lanes(x)
            plans.append((i, "two", len(blocks), x[lanes.size:]))
            blocks.append(lanes)
            squared.append(True)
        else:
            terms = _terms(a, ord)
            ranges = _chunks(n, threads)
            plans.append((i, "seq", len(blocks), len(ranges), x.dtype))
            blocks += [terms[b:e, None] for b, e in ranges]
            squared += [False] * len(ranges)
    sums, scanned = _sequential_sums(blocks, squared)
    zero = _opaque_zero(scanned, flat)
    for plan in plans:
        if plan[1] == "two":
            i, _, index, tail = plan
            results[i] = _norm_two_finish(sums[index], tail, zero)
        else:
            i, _, index, count, dtype = plan
            acc = jnp.zeros((), dtype)
            for s in sums[index:index + count]:
                acc = acc + s[0]
            results[i] = _project(acc, ord)
    return results  # type: ignore[return-value]


_vector_norms_jit = jax.jit(_vector_norms, static_argnums=(1, 2))


def vector_norms(xs, ord: float = 2.0) -> list[jax.Array]:
    """``[torch.linalg.vector_norm(x, ord) for x in xs]`` on CPU, each in torch's summation order.

    Args:
      xs: a sequence of arrays (each reduced over all its elements).
      ord: the order ``p`` (``inf`` / ``-inf`` for the max / min of ``|x|``).

    Returns:
      A list of 0-d arrays in the inputs' dtypes; float32 and float64 are
      torch's bit for bit (see the module docstring for the ``powf`` caveat).

    Raises:
      RuntimeError: a negative ``ord`` on an empty tensor, as torch.
    """
    ord = float(ord)
    xs = tuple(jnp.asarray(x) for x in xs)
    _check_ord(ord, [x.size for x in xs])
    if not xs:
        return []
    return _vector_norms_jit(xs, ord, get_intra_op_threads())


def vector_norm(x, ord: float = 2.0) -> jax.Array:
    """``torch.linalg.vector_norm(x, ord)`` over all elements of ``x`` on CPU (see :func:`vector_norms`)."""
    return vector_norms([x], ord)[0]
