"""torch's CPU ``norm`` and ``sum`` along a contiguous last dimension, row by row, in ATen's summation order.

Adafactor reduces its gradient to row and column second moments
(``torch.norm(grad, dim=-1)``, ``dim=-2``), averages the row moments
(``row_var.mean(dim=-2)``) and scales its update by whole-tensor norms.
XLA's reductions add in another order than ATen's, so the float32 sums
differ in the last bits; these functions add in ATen's order (torch 2.13,
x86-64 CPU with AVX2 or AVX-512, contiguous input), batched over rows:

- :func:`norm2_rows` is the ``is_reduce_lastdim`` branch of
  ``norm_kernel_tensor_iterator_impl`` (``cpu/ReduceOpsKernel.cpp``): one
  ``Vectorized`` accumulator of 8 float32 / 4 float64 lanes (``norm_stub`` is
  an AVX2 kernel on AVX-512 CPUs too), ``acc += x * x`` over the first
  ``n - n % lanes`` elements (product and sum rounded apart), then the lanes
  added in order, then the remaining elements in order: the compiler runs
  the first ``rem - rem % 4`` of them as rounded products (float32 only: a
  float64 tail has under 4) and the rest as fused multiply-adds; then
  ``std::sqrt``. A row of one element is ``abs(x)`` (``linalg_vector_norm`` returns ``abs`` when every
  reduced dimension has size 1).
- :func:`norm2_columns` (a strided reduction) adds ``x * x`` down each
  column in order, product and sum rounded apart (``binary_kernel_reduce``).
- :func:`sum_rows` is ``cascade_sum`` (``cpu/SumKernel.cpp``): rows of at
  least ``lanes`` elements take ``vectorized_inner_sum`` (``row_sum`` of the
  vectors: four interleaved accumulators, each a 4-level cascade of
  sequential blocks of ``2**max(4, ceil_log2(n) // 4)``; then the scalar tail
  from 0, then the lanes); shorter rows take the scalar ``row_sum`` (four
  interleaved accumulators, leftovers into the first). Rows of 32768
  elements or more are split across torch's intra-op threads by ATen and
  are not reproduced.

Sequential sums of more than a few terms are ``lax.scan`` loops, whose
additions XLA never reassociates. XLA contracts ``acc + x * x`` into a fused
multiply-add only sometimes, so the fused ones are emulated (Boldo and
Melquiond's round-to-odd sum of an exact product), and :func:`divide` gives
torch's correctly rounded division where XLA would multiply by a reciprocal.
:func:`two_product` and :func:`two_sum` are the error-free transformations
they are built from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.kernels import TorchOps

__all__ = ["divide", "norm2_columns", "norm2_rows", "sum_rows", "two_product", "two_sum"]

_UNROLL = 16  # sequential sums of at most this many terms are written out, longer ones scanned


def _lanes(dtype) -> int:
    """Elements of one AVX2 ``Vectorized`` register (32 bytes)."""
    return 32 // jnp.dtype(dtype).itemsize


def _sequential(terms: jax.Array) -> jax.Array:
    """``((0 + t[0]) + t[1]) + ...`` along axis 0, in order (``zeros`` for no terms)."""
    if terms.shape[0] == 0:
        return jnp.zeros(terms.shape[1:], terms.dtype)
    if terms.shape[0] <= _UNROLL:
        acc = terms[0]
        for i in range(1, terms.shape[0]):
            acc = acc + terms[i]
        return acc
    acc, _ = lax.scan(lambda a, t: (a + t, None), jnp.zeros(terms.shape[1:], terms.dtype), terms)
    return acc


def norm2_rows(ops: TorchOps, x: jax.Array) -> jax.Array:
    """``torch.linalg.vector_norm(x, 2, dim=-1)`` of a 2-D ``x`` on CPU: one norm per row, torch's bits."""
    rows, n = x.shape
    if n == 1:
        return jnp.abs(x[:, 0])
    lanes = _lanes(x.dtype)
    block = 4  # the compiler's unrolled blocks in the scalar tail (measured: float32 only, float64 rem < 4)
    body = n - n % lanes
    if body:
        squares = ops.rounded(x[:, :body] * x[:, :body]).reshape(rows, body // lanes, lanes)
        acc = _sequential(jnp.moveaxis(squares, 1, 0))
        total = acc[:, 0]
        for j in range(1, lanes):
            total = total + acc[:, j]
    else:
        total = jnp.zeros((rows,), x.dtype)
    rem = n - body
    blocked = rem - rem % block
    for i in range(rem):
        v = x[:, body + i]
        # Blocked tail elements square in a vector register (rounded); the rest are fused multiply-adds,
        # emulated because XLA contracts ``total + v * v`` only sometimes.
        total = total + ops.rounded(v * v) if i < blocked else _fma_square(ops, v, total)
    return jnp.sqrt(total)


def norm2_columns(ops: TorchOps, x: jax.Array) -> jax.Array:
    """``torch.linalg.vector_norm(x, 2, dim=-2)`` of a 3-D ``x`` (batch, m, n) on CPU: shape (batch, n).

    A strided reduction is ``binary_kernel_reduce`` with ``NormTwoOps``: each
    column ``acc + x * x`` in order from 0, product and sum rounded apart.
    With ``n == 1`` the column is contiguous and takes :func:`norm2_rows`.
    """
    batch, m, n = x.shape
    if n == 1 or m == 1:
        return norm2_rows(ops, x.reshape(batch * n, m)).reshape(batch, n)
    squares = ops.rounded(x * x)
    return jnp.sqrt(_sequential(jnp.moveaxis(squares, 1, 0)))


def two_product(ops: TorchOps, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a * b`` rounded and its exact error (Dekker's product with Veltkamp's split; no FMA needed)."""
    p = ops.rounded(a * b)
    factor = 2.0 ** ((jnp.finfo(a.dtype).nmant + 2) // 2) + 1

    def split(x):
        c = ops.rounded(x * factor)
        hi = c - (c - x)
        return hi, x - hi

    ah, al = split(a)
    bh, bl = split(b)
    return p, (((ops.rounded(ah * bh) - p) + ops.rounded(ah * bl)) + ops.rounded(al * bh)) + ops.rounded(al * bl)


def divide(ops: TorchOps, a: jax.Array, b: jax.Array) -> jax.Array:
    """``a / b`` correctly rounded (torch's CPU division), whatever XLA makes of a division.

    XLA may divide by a broadcast divisor through its reciprocal (within an
    ULP or two, and FMA contraction of a Markstein correction is not reliable
    after a reduction), so the quotient is picked among ``q`` and its two
    neighbours by the exact residual ``a - c * b`` (Dekker's product; ``a -
    hi`` is exact by Sterbenz's lemma): the correctly rounded quotient has the
    smallest. Normal, finite operands; others keep XLA's quotient.
    """
    q = ops.rounded(a / b)

    def residual(c):
        hi, lo = two_product(ops, c, b)
        return jnp.abs((a - hi) - lo)

    # ``q`` wins ties: a zero quotient keeps its sign (its neighbours are subnormals, flushed to zero on CPU).
    best, best_residual = q, residual(q)
    for c in (jnp.nextafter(q, jnp.asarray(-jnp.inf, q.dtype)), jnp.nextafter(q, jnp.asarray(jnp.inf, q.dtype))):
        r = residual(c)
        better = r < best_residual
        best, best_residual = jnp.where(better, c, best), jnp.where(better, r, best_residual)
    return jnp.where(jnp.isfinite(best_residual), best, q)


def two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``s = a + b`` rounded and its exact error (Knuth): ``s + e == a + b``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fma_square(ops: TorchOps, a: jax.Array, acc: jax.Array) -> jax.Array:
    """``fma(a, a, acc)`` with one rounding and no FMA instruction (Boldo and Melquiond).

    ``a * a = uh + ul`` exactly (Dekker's product, Veltkamp's split), ``acc + uh = th + tl``
    exactly (two-sum); ``RN(th + RO(tl + ul))`` with ``RO`` rounding to odd is the correctly
    rounded ``acc + a * a``.
    """
    uh = ops.rounded(a * a)
    c = ops.rounded(a * (2.0 ** ((jnp.finfo(a.dtype).nmant + 2) // 2) + 1))
    hi = c - (c - a)
    lo = a - hi
    ul = (((hi * hi - uh) + hi * lo) + lo * hi) + lo * lo  # every partial product is exact
    th, tl = two_sum(acc, uh)
    v, err = two_sum(tl, ul)
    itype = jnp.int32 if a.dtype == jnp.float32 else jnp.int64
    bits = lax.bitcast_convert_type(v, itype)
    odd = jnp.where(((bits & 1) == 0) & (err != 0), bits + jnp.where((err > 0) == (v > 0), 1, -1).astype(itype), bits)
    return th + lax.bitcast_convert_type(odd, v.dtype)


def _cascade(rows: jax.Array) -> jax.Array:
    """ATen's ``multi_row_sum`` over axis 0 of ``rows``: a 4-level cascade of sequential blocks."""
    size = rows.shape[0]
    power = max(4, (max(size - 1, 0).bit_length() if size > 1 else 0) // 4)
    step = 1 << power
    chunks = size // step
    # Level 0: each full block summed from 0; the leftover rows summed from 0 at the end.
    level = _sequential(jnp.moveaxis(rows[: chunks * step].reshape(chunks, step, *rows.shape[1:]), 1, 0)) \
        if chunks else rows[:0]
    partials = []
    for _ in range(2):  # levels 1 and 2 flush every ``step`` entries into the next level
        full = level.shape[0] // step
        partials.append(_sequential(level[full * step:]))
        level = _sequential(jnp.moveaxis(level[: full * step].reshape(full, step, *level.shape[1:]), 1, 0)) \
            if full else level[:0]
    top = _sequential(level)  # level 3 accumulates without flushing
    acc = _sequential(rows[chunks * step:])
    for part in (*partials, top):
        acc = acc + part
    return acc


def _row_sum(terms: jax.Array) -> jax.Array:
    """ATen's ``row_sum`` along axis 0: four interleaved cascades, leftovers into the first, then combined."""
    size = terms.shape[0]
    quads = size // 4
    partial = _cascade(terms[: quads * 4].reshape(quads, 4, *terms.shape[1:]))
    first = partial[0]
    for i in range(quads * 4, size):
        first = first + terms[i]
    for k in range(1, 4):
        first = first + partial[k]
    return first


def sum_rows(x: jax.Array) -> jax.Array:
    """``x.sum(dim=-1)`` of a 2-D ``x`` on CPU (rows under 32768 elements): one sum per row, torch's bits."""
    rows, n = x.shape
    lanes = _lanes(x.dtype)
    if n < lanes:
        return _row_sum(x.T)
    vectors = n // lanes
    acc = _row_sum(jnp.moveaxis(x[:, : vectors * lanes].reshape(rows, vectors, lanes), 1, 0))  # (rows, lanes)
    total = jnp.zeros((rows,), x.dtype)
    for k in range(vectors * lanes, n):
        total = total + x[:, k]
    for k in range(lanes):
        total = total + acc[:, k]
    return total
