"""torch's float32 ``NormalFill16`` (its AVX2 kernel) compiled by XLA: :mod:`jax_impl.random._normal`'s numbers, faster.

:func:`jax_impl.random._normal.fill16` computes ``log256_ps`` and
``sincos256_ps`` of ``avx_mathfun.h`` in NumPy, each fused multiply-add of
GCC's contraction emulated exactly (:func:`jax_impl.random.fma.fma32`), some
twenty of them per block, each several NumPy passes: an order of magnitude
slower than torch's kernel, on every step that draws noise. Here the same
operations run as one XLA:CPU computation, where LLVM contracts ``a * b + c``
into the hardware FMA (as :class:`jax_impl.kernels.TorchOps` relies on); a
product that GCC rounds before its sum, where XLA could fuse either of two
products, is kept apart by :func:`jax_impl.kernels.rounded`.

The same numbers: every float32 uniform torch draws (``k / 2**24``) gives the
NumPy module's ``log256_ps`` and ``sincos256_ps`` bit for bit
(tests/random/test_normal_xla.py). XLA:CPU flushes denormals, which torch
does not; the transforms never meet one on those inputs, but the last step,
``fma(radius * cos, std, mean)``, takes the caller's ``std`` and ``mean``, so
a subnormal mean or std is left to NumPy, and a call reports whether any
result lies below float32's smallest normal: NumPy then computes the blocks
that hold one (a zero from a uniform of 0 is one, a flushed result another). Where the
compiled route does not give NumPy's numbers (no FMA contraction), it is not
used: each size bucket's first compiled call is checked against NumPy's.

Block counts are padded to powers of two (a compile per bucket, not per
tensor size) and cut into runs of at most ``2**16`` blocks.

A compiled step's own small standard normals (``staged.randn``) are handed
to the step as the transform's two halves (:func:`standard_halves`), which
the step joins itself (:func:`join_halves`): the transform runs between the
host's draw and the step with no wait and no copy through the host.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl._barrier import barrier
from jax_impl.kernels import rounded
from jax_impl.random import _normal

__all__ = ["HALVES_MAX_COUNT", "fill16", "halves_rows", "join_halves", "standard_halves"]

# Block counts: padded to a power of two from 16 (a compile per bucket), cut into runs of 2**16; from 1024
# the halves are joined by XLA, below by the host (:func:`_transform`).
_MIN_BLOCKS, _APART_BLOCKS, _MAX_BLOCKS = 16, 1 << 10, 1 << 16
_TINY = float(np.finfo(np.float32).tiny)


def _log256_ps(x: jax.Array, zero: jax.Array) -> jax.Array:
    """:func:`jax_impl.random._normal.log256_ps`, operation for operation."""
    f32 = jnp.float32
    x = jnp.maximum(x, _normal.MIN_NORM_POS)
    bits = lax.bitcast_convert_type(x, jnp.int32)
    e = ((bits >> 23) - 0x7F).astype(f32) + f32(1)
    half = np.array(0.5, np.float32).view(np.int32)
    x = lax.bitcast_convert_type((bits & jnp.int32(~0x7F800000)) | jnp.int32(half), f32)
    mask = x < _normal.SQRTHF
    tmp = jnp.where(mask, x, f32(0))
    x = x - f32(1)
    e = e - mask.astype(f32)
    x = x + tmp
    z = x * x
    p = _normal.LOG_P
    y = p[0] * x + p[1]
    for c in p[2:]:
        y = y * x + c
    y = y * x
    y = y * z + rounded(e * _normal.LOG_Q1, zero)  # GCC fuses the first product, rounds the second
    y = -z * f32(0.5) + y
    return e * _normal.LOG_Q2 + (x + y)


def _sincos256_ps(x: jax.Array, zero: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`jax_impl.random._normal.sincos256_ps`, operation for operation."""
    f32, i32 = jnp.float32, jnp.int32
    sign_sin = lax.bitcast_convert_type(x, i32) & i32(-0x80000000)
    x = jnp.abs(x)
    j = ((x * _normal.FOPI).astype(i32) + 1) & ~1  # truncation, as cvttps
    y = j.astype(f32)
    sign_sin = sign_sin ^ ((j & 4) << 29)
    sin_poly = (j & 2) == 0
    sign_cos = (~(j - 2) & 4) << 29
    x = y * _normal.DP1 + x
    x = y * _normal.DP2 + x
    x = y * _normal.DP3 + x
    z = x * x
    c0, c1, c2 = _normal.COS_P
    yc = c0 * z + c1
    yc = yc * z + c2
    yc = rounded(yc * z, zero) * z + rounded(-(z * f32(0.5)), zero)  # fma(yc * z, z, -(z * 0.5))
    yc = yc + f32(1)
    s0, s1, s2 = _normal.SIN_P
    ys = s0 * z + s1
    ys = ys * z + s2
    ys = rounded(ys * z, zero) * x + x
    ysin2 = jnp.where(sin_poly, ys, f32(0))
    ysin1 = jnp.where(sin_poly, f32(0), yc)
    s = ysin1 + ysin2
    c = (yc - ysin1) + (ys - ysin2)
    return (lax.bitcast_convert_type(lax.bitcast_convert_type(s, i32) ^ sign_sin, f32),
            lax.bitcast_convert_type(lax.bitcast_convert_type(c, i32) ^ sign_cos, f32))


def _transform(blocks: jax.Array, rows: jax.Array, mean: jax.Array, std: jax.Array, zero: jax.Array,
               apart: bool) -> tuple[Any, jax.Array]:
    """NormalFill16 on each row of ``blocks``, and whether none of the first ``rows`` results lies below float32's
    smallest normal (zero or subnormal: where a flushed denormal could hide).

    The two halves of each block are two arrays: joined in one loop, each element would compute its pair's
    logarithm and sine-cosine again, in rows of eight (several times slower). ``apart``: joined here, after
    jax_impl's barrier (a call into Python, which waits for the GIL: as long as a small draw takes, or
    longer where the caller's thread runs Python meanwhile, as a step's noise dispatched ahead does); else
    returned as they are, for the host to join, and each reader of a half computes it again.
    """
    u1 = jnp.float32(1) - blocks[:, :8]
    u2 = blocks[:, 8:]
    radius = jnp.sqrt(jnp.float32(-2) * _log256_ps(u1, zero))
    s, c = _sincos256_ps(_normal.TWO_PI_F32 * u2, zero)
    halves = (rounded(radius * c, zero) * std + mean, rounded(radius * s, zero) * std + mean)
    if apart:
        # Computed once, then read by the join and by the flag's minima: without the barrier XLA fuses the
        # transform into each of its three readers, and computes the sine-cosine three times.
        halves = tuple(barrier(halves))
    padding = lax.broadcasted_iota(jnp.int32, halves[0].shape, 0) >= rows

    def smallest(half):  # of the magnitudes' bits: infinities and NaNs count as normal here
        magnitude = lax.bitcast_convert_type(half, jnp.int32) & jnp.int32(0x7FFFFFFF)
        return jnp.min(jnp.where(padding, jnp.int32(0x7F800000), magnitude))

    normal = jnp.minimum(*map(smallest, halves)) >= jnp.int32(0x00800000)
    return (jnp.concatenate(halves, axis=1) if apart else halves), normal


@functools.cache
def _kernels() -> Callable[[np.ndarray, int, np.float32, np.float32], tuple[np.ndarray, bool]] | None:
    """The jitted transform on the CPU device (its halves joined by XLA or by the host, by size), or ``None``
    where torch does not take ``avx_mathfun.h``'s functions on this CPU, in a child process, or where JAX
    has no CPU backend. Its ``halves`` attribute gives a small bucket's standard-normal halves on the
    device, not awaited (:func:`standard_halves`)."""
    if not _normal.vectorized_float_kernel() or multiprocessing.parent_process() is not None:
        # A DataLoader worker (a child process) drawing augmentation noise keeps NumPy's transform: it
        # would start jax's runtime for it, and a forked child must not use its parent's.
        return None
    try:
        cpu = jax.local_devices(backend="cpu")[0]
    except RuntimeError:  # pragma: no cover - a JAX without its CPU backend
        return None
    jitted = {a: jax.jit(functools.partial(_transform, apart=a)) for a in (False, True)}
    executables: dict[tuple[int, bool], Any] = {}
    on_cpu = jax.default_backend() == "cpu"

    def executable(args: tuple, apart: bool) -> Any:
        # Compiled ahead of time, one executable per bucket: an executable runs now even while a function is
        # being traced (a port's forward drawing torch.randn on the host: the draw is a value of this call,
        # not an operation of that function), and its trace is not made under that trace's constant folding
        # (which would run the transform's iota as a computation of its own, compiled for each bucket).
        run = executables.get((args[0].shape[0], apart))
        if run is None:
            run = executables[args[0].shape[0], apart] = jitted[apart].lower(*args).compile()
        return run

    scalars: dict[int, tuple[jax.Array, ...]] = {}

    def halves(blocks: np.ndarray, rows: int) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        """Standard normals' cosine and sine halves of ``blocks`` (a bucket below ``_APART_BLOCKS``) and the
        flag, on the device, not awaited."""
        tail = scalars.get(rows)
        if tail is None:  # placed once per size: a NumPy scalar argument is copied to the device at every call
            # Placed now even while a function is being traced (a step called inside a jit): kept, a tracer
            # would outlive its trace.
            with jax.ensure_compile_time_eval():
                tail = scalars[rows] = tuple(jax.device_put(v) for v in (np.int32(rows), np.float32(0),
                                                                         np.float32(1), np.int32(0)))
        args = (blocks, *tail)
        return executable(args, False)(*args)

    def compiled(blocks: np.ndarray, rows: int, mean: np.float32, std: np.float32) -> tuple[np.ndarray, bool]:
        args = (blocks, np.int32(rows), mean, std, np.int32(0))
        args = args if on_cpu else jax.device_put(args, cpu)
        apart = blocks.shape[0] >= _APART_BLOCKS
        run = executable(args, apart)
        if apart:
            out, normal = run(*args)
            return np.asarray(out), bool(normal)
        (cosines, sines), normal = run(*args)
        out = np.empty_like(blocks)
        out[:, :8], out[:, 8:] = np.asarray(cosines), np.asarray(sines)
        return out, bool(normal)

    compiled.halves = halves  # type: ignore[attr-defined]
    return compiled


# When a bucket is compiled: a bucket of at most _EAGER_BLOCKS rows from its second request (a loop's noise,
# drawn at every step, where NumPy's transform costs several times the compiled call's dispatch); a larger one
# once NumPy has transformed _COMPILE_BLOCKS rows of it, about as long as tracing and compiling it takes (0.3 to
# 0.5 s; NumPy's transform takes about 2 us a row): a model's initial weights, a few draws of each large size,
# then pay for no compile they would not repay, and a large draw repeated at every step is compiled after a few.
_EAGER_BLOCKS, _COMPILE_BLOCKS = 1 << 10, 200_000
_SPENT: dict[int, int] = {}  # bucket -> rows NumPy has transformed (requested before when present)
_CHECKED: set[int] = set()  # buckets compiled and checked against NumPy's numbers
_BROKEN: list[bool] = []  # [True] once a compiled result was not NumPy's: this route is not used again


def _bucket(rows: int) -> int:
    return max(_MIN_BLOCKS, 1 << (rows - 1).bit_length())


def _padded(blocks: np.ndarray, size: int) -> np.ndarray:
    """``blocks`` with rows of uniforms 0.5 (harmless inputs) up to the bucket's ``size``."""
    rows = blocks.shape[0]
    return blocks if size == rows else np.concatenate([blocks, np.full((size - rows, 16), 0.5, np.float32)])


def _due(bucket: int) -> bool:
    """Whether ``bucket`` takes the compiled route now (see ``_EAGER_BLOCKS``)."""
    spent = _SPENT.get(bucket)
    return spent is not None and (bucket <= _EAGER_BLOCKS or spent >= _COMPILE_BLOCKS)


def fill16(blocks: np.ndarray, mean: float, std: float) -> np.ndarray | None:
    """:func:`jax_impl.random._normal.fill16` of float32 ``blocks`` (``(k, 16)`` uniforms), compiled; ``None``
    where NumPy's must run.

    NumPy's runs for another dtype, on a CPU whose torch takes the C library's functions, for a subnormal
    mean or std, and for a size bucket until it is compiled: a small bucket from its second request, a
    large one once NumPy has spent about a compile's time on it (``_EAGER_BLOCKS``, ``_COMPILE_BLOCKS``).
    A compile then pays only for draws that repeat (a step's noise), not for draws made once or a few times
    (a model's initial weights). A bucket's first compiled call is checked against NumPy's numbers; a
    difference turns this route off for the process.
    """
    mean32, std32 = np.float32(mean), np.float32(std)
    if blocks.dtype != np.float32 or _BROKEN or any(0 < abs(v) < _TINY for v in (mean32, std32)):
        return None
    compiled = _kernels()
    runs = [blocks[i:i + _MAX_BLOCKS] for i in range(0, blocks.shape[0], _MAX_BLOCKS)]
    if compiled is None or not all(_due(_bucket(run.shape[0])) for run in runs):
        for run in runs:
            bucket = _bucket(run.shape[0])
            _SPENT[bucket] = _SPENT.get(bucket, 0) + run.shape[0]
        return None
    results = []
    for run in runs:
        rows, size = run.shape[0], _bucket(run.shape[0])
        padded = _padded(run, size)
        result, normal = compiled(padded, rows, mean32, std32)
        result = result[:rows]
        if not normal:
            # A zero or subnormal result (a uniform of 0 gives zeros with mean 0; a flushed denormal too):
            # NumPy's exact transform for the blocks that hold one.
            low = np.flatnonzero((np.abs(result) < _TINY).any(axis=1))
            result = result.copy()
            result[low] = _normal.fill16(run[low], mean, std)
        if size not in _CHECKED:
            if result.tobytes() != _normal.fill16(run, mean, std).tobytes():
                _BROKEN.append(True)
                return None
            _CHECKED.add(size)
        results.append(result)
    return results[0] if len(results) == 1 else np.concatenate(results)  # read-only where XLA wrote it


# -- standard normals handed to a compiled step in halves -------------------------------------------------------

# A step's noise of up to HALVES_MAX_COUNT standard normals is handed to the step as its transform's two halves,
# which the step joins (a bucket below _APART_BLOCKS: the transform that joins them itself does so after a
# host-side barrier).
HALVES_MAX_COUNT = (_APART_BLOCKS // 2) * 16


def halves_rows(count: int) -> int:
    """The rows of each half of ``count`` standard normals (their blocks, the redrawn last one included,
    padded to the size bucket)."""
    return _bucket(count // 16 + (1 if count % 16 else 0))


def _device_ready(rows: int) -> bool:
    """Whether :func:`standard_halves` takes ``rows`` blocks: a size bucket already compiled and checked by
    :func:`fill16` (a size drawn before), below ``_APART_BLOCKS``, on a CPU-only JAX."""
    size = _bucket(rows)
    return (not _BROKEN and size < _APART_BLOCKS and size in _CHECKED and _kernels() is not None
            and jax.default_backend() == "cpu")


_HALVES_CHECKED: set[int] = set()  # buckets whose first halves were NumPy's


def standard_halves(blocks: np.ndarray, *, dispatch: bool = True) -> tuple[Any, Any]:
    """torch's float32 ``normal_(0, 1)`` transform of ``blocks`` (``(rows, 16)`` uniforms) as its cosine and
    sine halves, each ``(halves_rows, 8)``: ``jax.Array`` s whose computation is dispatched and not awaited
    where :func:`_device_ready` holds, else NumPy's (padded rows zero). ``dispatch=False`` (a host callback's
    thread, which must not dispatch a computation): NumPy's.

    Mean 0 and standard deviation 1 leave no result a flushed denormal could touch (a nonzero
    ``radius * cos`` is above 1e-11; an exact zero is computed exactly), so the transform's flag is not
    read. The first halves of each bucket are checked against NumPy's; a difference returns NumPy's and
    turns the compiled route off for the process.
    """
    rows, size = blocks.shape[0], _bucket(blocks.shape[0])
    padded = _padded(blocks, size)
    if dispatch and _device_ready(rows):
        (cosines, sines), _ = _kernels().halves(padded, rows)
        if size in _HALVES_CHECKED:
            return cosines, sines
        expected = _normal.fill16(blocks, 0.0, 1.0)
        if (np.asarray(cosines)[:rows].tobytes() == expected[:, :8].tobytes()
                and np.asarray(sines)[:rows].tobytes() == expected[:, 8:].tobytes()):
            _HALVES_CHECKED.add(size)
            return cosines, sines
        _BROKEN.append(True)
    out = np.zeros((size, 16), np.float32)
    computed = fill16(blocks, 0.0, 1.0) if dispatch else None
    out[:rows] = _normal.fill16(blocks, 0.0, 1.0) if computed is None else computed
    return np.ascontiguousarray(out[:, :8]), np.ascontiguousarray(out[:, 8:])


def join_halves(cosines: Any, sines: Any, count: int, shape: tuple[int, ...]) -> jax.Array:
    """Traced: the halves joined into torch's layout, each block's cosines then its sines, the redrawn last
    block (when ``count`` is not a multiple of 16) over the tail, in ``shape``. Pure data movement, fused
    into the step's use of the noise."""
    rows = count // 16 + (1 if count % 16 else 0)
    flat = jnp.concatenate([cosines, sines], axis=1)[:rows].reshape(-1)
    full = count // 16 * 16
    if count % 16:
        flat = jnp.concatenate([flat[:count - 16], flat[full:full + 16]])
    return flat.reshape(shape)
