"""``torch.dot`` of two contiguous 1-D float64/float32 CPU tensors, bit for bit, in NumPy.

``at::native::dot`` (``aten/src/ATen/native/BlasKernel.cpp``, ``dot_impl_floating``)
calls BLAS for every length that fits an ``int``: ``ddot_`` / ``cblas_sdot``,
which the torch wheel links to oneMKL (2024.2, statically). ``torch.optim.LBFGS``
forms all its inner products (``flat_grad.dot(d)``, ``y.dot(s)``, the two-loop
recursion's ``old_stps[i].dot(q)`` and ``old_dirs[i].dot(r)``) this way, on
contiguous vectors. The order MKL sums in, read from its kernels
(``mkl_blas_ddot`` / ``mkl_blas_sdot`` and the ``mkl_blas_{avx512,avx2}_x{d,s}dot``
they dispatch to) and measured against torch:

- **Kernel.** ``L`` lanes per register (AVX-512: 8 float64 / 16 float32; AVX2:
  4 / 8), four accumulators ``A0..A3``, ``B = 4 L`` elements per block. Element
  ``k B + j`` of the main loop goes to accumulator ``j // L``, lane ``j % L``:
  ``A = fma(x, y, A)``, rounded once, blocks in order (no dependence on the
  alignment: the loads are unaligned). The remainder ``r = n % B`` follows in
  order: ``2 L`` elements into ``A0, A1`` when ``r & 2L``, then ``L`` into ``A0``
  when ``r & L``, then the last ``r % L`` zero-padded into ``A0``'s first lanes.
- **Reduction.** ``S = (A2 + A3) + (A0 + A1)`` lane by lane, then across lanes:
  AVX-512 halves (``T_i = S_i + S_{i + L/2}``) down to two float64 lanes
  (``T_0 + T_1``) or four float32 lanes (``(T_0 + T_1) + (T_2 + T_3)``); AVX2
  float64 is ``(S_0 + S_1) + (S_2 + S_3)``, AVX2 float32
  ``((S_0 + S_1) + (S_4 + S_5)) + ((S_2 + S_3) + (S_6 + S_7))``.
- **Threads.** Beyond 4095 float64 / 8191 float32 elements with more than one
  MKL thread, ``T = min(ceil(n / 2048), threads)`` (float32: ``ceil(n / 4096)``)
  threads each run the kernel on a contiguous chunk, the first ``n % T`` chunks
  one element longer (``n // T + 1``), and the chunk sums are added in thread
  order, ``((p_0 + p_1) + p_2) + ...``, in the dtype. MKL's thread count is
  torch's ``get_num_threads()`` (``torch.set_num_threads`` sets both).

The instruction set is MKL's choice: AVX-512 where the CPU has it, unless
``MKL_ENABLE_INSTRUCTIONS`` or ``MKL_CBWR`` asks for less (``AVX2``); other
choices (``SSE4_2``, ``AVX``, ``COMPATIBLE``, CPUs without AVX2/FMA) take
kernels that are not reproduced here, and :func:`torch_dot` falls back to
``np.dot`` for them.

**CPUs not made by Intel** (AMD's, measured on an EPYC with AVX-512) take
MKL's SSE2 kernel whatever the switches say (``"sse2"``): two float64 / four
float32 lanes, four accumulators, no fused multiply-add (each product rounds,
then each sum). The remainder goes to ``A0``: float64 in whole registers,
then the last odd element into lane 0; float32 as above (``2 L``, ``L``, then
the last ``r % L`` one by one into lane 0). The accumulators are summed in
order, ``((A0 + A1) + A2) + A3``, then the lanes by halves (float64
``S_0 + S_1``, float32 ``(S_0 + S_2) + (S_1 + S_3)``). Its thread split is not
the one above and is not reproduced: lengths beyond 4095 / 8191 elements on
more than one thread fall back to ``np.dot``.

The fused multiply-adds are exact: each product is split error-free once
(Dekker), and every step rounds ``A + x y`` once (TwoSum and rounding to odd
for float64, a halfway check for float32, as :mod:`jax_impl.random.fma`);
long float64 vectors run the steps as a jitted ``lax.scan`` of additions.
Inputs with non-finite values or magnitudes outside ``[2**-480, 2**495]`` take
:func:`jax_impl.random.fma.fma64` step by step. float32 accumulators in
float32's subnormal range are rounded from float64 as
:func:`jax_impl.random.fma.fma32` rounds them (its halfway check assumes
normal float32 results).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl._cpuinfo import cpu_flags, cpu_vendor
from jax_impl.nn.utils.linalg_norm import get_intra_op_threads
from jax_impl.random.fma import fma32, fma64

__all__ = ["mkl_dot_isa", "torch_dot"]

_F32, _F64 = np.float32, np.float64

# Lanes per register, by instruction set and dtype.
_LANES = {("avx512", _F64): 8, ("avx512", _F32): 16, ("avx2", _F64): 4, ("avx2", _F32): 8}
# torch's names of dtypes in its error messages.
_TORCH_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
                "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
                "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
# mkl_blas_{d,s}dot: the largest length summed on one thread, and the elements per thread (log2).
_THREADED = {_F64: (4095, 11), _F32: (8191, 12)}


def _requested(value: str) -> str | None:
    """The instruction set that an ``MKL_ENABLE_INSTRUCTIONS`` / ``MKL_CBWR`` value caps MKL at."""
    value = value.strip().upper().split(",")[0]
    if not value or value == "AUTO":
        return None
    if value.startswith("AVX512"):
        return "avx512"
    if value.startswith("AVX2"):
        return "avx2"
    return "other"


def mkl_dot_isa() -> str | None:
    """The MKL dot kernel torch runs on this machine: ``"avx512"``, ``"avx2"``, ``"sse2"``, or ``None`` (not
    reproduced).

    On Intel CPUs MKL takes the widest kernel the CPU supports (``avx512f``;
    ``avx2`` with ``fma``), capped by ``MKL_ENABLE_INSTRUCTIONS`` and
    ``MKL_CBWR``. On other x86 CPUs it takes its SSE2 kernel, which those
    switches do not change.
    """
    vendor, flags = cpu_vendor(), cpu_flags()
    if vendor and vendor != "GenuineIntel":
        return "sse2" if "sse2" in flags else None
    isa = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else None
    order = ["avx2", "avx512"]
    for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
        cap = _requested(os.environ.get(var, ""))
        if cap == "other":
            return None
        if cap is not None and isa is not None and order.index(cap) < order.index(isa):
            isa = cap
    return isa


def _two_prod(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker: ``p + e == x * y`` exactly (no overflow or underflow in the range :func:`_in_range` admits)."""
    p = x * y
    cx = 134217729.0 * x  # 2**27 + 1: Veltkamp's split into 26-bit halves
    xh = cx - (cx - x)
    xl = x - xh
    cy = 134217729.0 * y
    yh = cy - (cy - y)
    yl = y - yh
    return p, ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def _in_range(v: np.ndarray) -> bool:
    """Whether every nonzero ``|v|`` lies in ``[2**-480, 2**495]``: then the products, their errors and all sums
    are multiples of ``2**-1064`` without overflow, and the error-free transformations below are exact."""
    a = np.abs(v)
    if not np.isfinite(a).all():
        return False
    nonzero = a[a != 0]
    return nonzero.size == 0 or bool(nonzero.min() >= 2.0**-480 and nonzero.max() <= 2.0**495)


def _steps(x: np.ndarray, y: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's steps as rows of ``4 lanes`` products' factors: the main blocks, then the ``2 lanes``,
    ``lanes`` and tail steps of the remainder, zero-padded (``fma(0, 0, A) == A``: the accumulators start at
    +0 and never hold -0, so padding changes nothing)."""
    block = 4 * lanes
    n = x.size
    main = n - n % block
    rem = n % block
    widths = [w for w in (2 * lanes, lanes) if rem & w] + ([rem % lanes] if rem % lanes else [])
    xs = np.zeros((main // block + len(widths), block), x.dtype)
    ys = np.zeros_like(xs)
    xs[:main // block] = x[:main].reshape(-1, block)
    ys[:main // block] = y[:main].reshape(-1, block)
    pos = main
    for row, width in enumerate(widths, start=main // block):
        xs[row, :width], ys[row, :width] = x[pos:pos + width], y[pos:pos + width]
        pos += width
    return xs, ys


# From this many steps on, the float64 recurrence runs as an XLA loop (one compile per length).
_SCAN_STEPS = 64


def _fma_step(acc: jax.Array, pe: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
    """``fma`` from the exact product ``p + e``: TwoSum, ``t + e`` rounded to odd, one rounding. Additions and bit
    operations only: XLA neither reassociates nor contracts them (there are no products to fuse)."""
    p, e = pe
    s = p + acc
    bv = s - p
    t = (p - (s - bv)) + (acc - bv)
    w = t + e
    bv = w - t
    d = (t - (w - bv)) + (e - bv)
    bits = lax.bitcast_convert_type(w, jnp.int64)
    towards = jnp.where((d > 0) == (w > 0), 1, -1).astype(jnp.int64)
    odd = jnp.where(((bits & 1) == 0) & (d != 0), bits + towards, bits)
    return s + lax.bitcast_convert_type(odd, jnp.float64), None


@jax.jit
def _scan64(p: jax.Array, e: jax.Array) -> jax.Array:
    return lax.scan(_fma_step, jnp.zeros(p.shape[1], p.dtype), (p, e))[0]


def _in_normal_range(v: np.ndarray) -> bool:
    """Nonzero ``|v|`` in ``[2**-400, 2**495]``: every nonzero term is then a multiple of ``2**-904``, far from
    the subnormals that XLA's CPU flushes to zero."""
    a = np.abs(v)
    nonzero = a[a != 0]
    return bool(np.isfinite(a).all()) and (nonzero.size == 0 or bool(nonzero.min() >= 2.0**-400
                                                                       and nonzero.max() <= 2.0**495))


def _accumulate64(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``A = fma(xs[k], ys[k], A)`` for the rows in order, from ``A = 0``: the float64 accumulators.

    Each step is ``s + t = p + A`` (TwoSum) and ``A = s + (t + e)``, with ``p + e`` the exact product. That
    is ``fma`` unless ``t + e`` rounds and ``s + (t + e)`` then lands on a rounding tie; where it does,
    ``t + e`` rounded to odd decides (Boldo and Melquiond). The fast recurrence runs first, and is checked
    against the rounded-to-odd one over all steps at once; from the first step where they differ, the
    exact :func:`fma64` takes over.
    """
    acc = np.zeros(xs.shape[1], _F64)
    if not (_in_range(xs) and _in_range(ys)):
        for x, y in zip(xs, ys):
            acc = fma64(x, y, acc)
        return acc
    p, e = _two_prod(xs, ys)
    steps = p.shape[0]
    if steps >= _SCAN_STEPS and _in_normal_range(xs) and _in_normal_range(ys):
        with jax.enable_x64(True):
            return np.asarray(_scan64(p, e))
    before, s, w = np.empty_like(p), np.empty_like(p), np.empty_like(p)
    t, bv = np.empty_like(acc), np.empty_like(acc)
    for k in range(steps):
        pk = p[k]
        before[k] = acc
        sk = np.add(pk, acc, out=s[k])
        np.subtract(sk, pk, out=bv)
        np.subtract(acc, bv, out=t)
        np.subtract(sk, bv, out=bv)
        np.subtract(pk, bv, out=bv)
        np.add(bv, t, out=t)
        wk = np.add(t, e[k], out=w[k])
        np.add(sk, wk, out=acc)
    # t + e again, with its rounding error d, for every step at once.
    bv = s - p
    t = (p - (s - bv)) + (before - bv)
    bv = w - t
    d = (t - (w - bv)) + (e - bv)
    odd = (d != 0) & ((w.view(np.uint64) & np.uint64(1)) == 0)
    if not odd.any():
        return acc
    w_odd = np.where(odd, np.nextafter(w, np.where(d > 0, np.inf, -np.inf)), w)
    differs = np.nonzero(((s + w_odd) != (s + w)).any(axis=1))[0]
    if differs.size == 0:
        return acc
    acc = before[differs[0]].copy()
    for x, y in zip(xs[differs[0]:], ys[differs[0]:]):
        acc = fma64(x, y, acc)
    return acc


def _accumulate32(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``A = fmaf(xs[k], ys[k], A)`` for the rows in order, from ``A = 0``: the float32 accumulators.

    The product is exact in float64 and ``p + A`` rounds once there; rounding that to float32 is the fused
    result unless the double lands on a float32 tie (29 dropped bits ``1000...0``). The fast recurrence runs
    first; from the first step that lands on a tie, the exact :func:`fma32` takes over.
    """
    p = xs.astype(_F64) * ys.astype(_F64)
    acc = np.zeros(xs.shape[1], _F32)
    if not np.isfinite(p).all():
        for x, y in zip(xs, ys):
            acc = fma32(x, y, acc)
        return acc
    s = np.empty_like(p)
    for k in range(p.shape[0]):
        acc = np.add(p[k], acc, out=s[k]).astype(_F32)
    ties = np.nonzero(((s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)).any(axis=1))[0]
    if ties.size == 0:
        return acc
    k0 = ties[0]
    acc = s[k0 - 1].astype(_F32) if k0 else np.zeros(xs.shape[1], _F32)
    for x, y in zip(xs[k0:], ys[k0:]):
        acc = fma32(x, y, acc)
    return acc


def _kernel_sse2(x: np.ndarray, y: np.ndarray):
    """MKL's SSE2 dot on contiguous ``x``, ``y``: rounded products, summed as the module docstring says."""
    dtype = x.dtype.type
    lanes = 16 // x.itemsize
    block = 4 * lanes
    with np.errstate(all="ignore"):  # overflow to inf and inf - inf are MKL's results too
        p = x * y
        main = p.size - p.size % block
        acc = np.zeros(block, dtype)  # +0 first, as MKL's accumulators: [-0] . [1] is +0
        if main:
            # cumsum runs sequentially down axis 0: block after block into each lane, as the kernel adds them.
            acc = np.cumsum(np.concatenate([acc[None], p[:main].reshape(-1, block)]), axis=0, dtype=dtype)[-1]
        acc = acc.reshape(4, lanes)
        pos, rem = main, p.size - main
        if dtype == _F64:
            rows = [0] * (rem // lanes)
        else:
            rows = ([0, 1] if rem & 2 * lanes else []) + ([0] if rem & lanes else [])
        for row in rows:
            acc[row] = acc[row] + p[pos:pos + lanes]
            pos += lanes
        for k in range(pos, p.size):
            acc[0, 0] = acc[0, 0] + p[k]
        s = ((acc[0] + acc[1]) + acc[2]) + acc[3]
        if dtype == _F64:
            return s[0] + s[1]
        return (s[0] + s[2]) + (s[1] + s[3])


def _kernel(x: np.ndarray, y: np.ndarray, isa: str):
    """One call of ``mkl_blas_{isa}_x{d,s}dot`` on contiguous ``x``, ``y`` (see the module docstring)."""
    dtype = x.dtype.type
    if isa == "sse2":
        return _kernel_sse2(x, y)
    lanes = _LANES[(isa, dtype)]
    xs, ys = _steps(x, y, lanes)
    acc = _accumulate64(xs, ys) if dtype == _F64 else _accumulate32(xs, ys)
    a = acc.astype(dtype).reshape(4, lanes)
    with np.errstate(all="ignore"):  # overflow to inf and inf - inf are MKL's results too
        return _reduce(a, isa, dtype)


def _reduce(a: np.ndarray, isa: str, dtype):
    """The accumulators' sum: lane by lane, then across the lanes (see the module docstring)."""
    s = (a[2] + a[3]) + (a[0] + a[1])
    if isa == "avx512":
        while s.size > (2 if dtype == _F64 else 4):
            s = s[:s.size // 2] + s[s.size // 2:]
        if dtype == _F64:
            return s[0] + s[1]
        return (s[0] + s[1]) + (s[2] + s[3])
    if dtype == _F64:
        return (s[0] + s[1]) + (s[2] + s[3])
    return ((s[0] + s[1]) + (s[4] + s[5])) + ((s[2] + s[3]) + (s[6] + s[7]))


def torch_dot(x: np.ndarray, y: np.ndarray, *, num_threads: int | None = None, isa: str | None = "auto"):
    """``torch.dot(x, y)`` (``x.dot(y)``) for 1-D float64 or float32 arrays, as torch computes it on this CPU.

    Args:
      x: a 1-D float64 or float32 array (taken contiguous, as torch's LBFGS vectors are).
      y: a 1-D array of the same length and dtype.
      num_threads: MKL's thread count, which is torch's ``torch.get_num_threads()``; ``None`` takes torch's
        default (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, else the physical cores). Only lengths above
        4095 (float64) / 8191 (float32) depend on it.
      isa: the MKL kernel to reproduce: ``"avx512"``, ``"avx2"``, ``"sse2"``, ``"auto"`` (:func:`mkl_dot_isa`), or
        ``None`` for ``np.dot``.

    Returns:
      A NumPy scalar of the inputs' dtype: MKL's sum, in the order of the module docstring.
    """
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.ndim != 1 or y.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {x.ndim}D and {y.ndim}D tensors")
    if x.dtype != y.dtype:
        names = [_TORCH_NAMES.get(v.dtype.name, v.dtype.name) for v in (x, y)]
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {names[0]} and {names[1]}")
    if x.size != y.size:
        raise RuntimeError("inconsistent tensor size, expected tensor [%d] and src [%d] to have the same number "
                           "of elements, but got %d and %d elements respectively" % (x.size, y.size, x.size, y.size))
    dtype = x.dtype.type
    if isa == "auto":
        isa = mkl_dot_isa()
    if dtype not in (_F64, _F32) or isa is None:
        return np.dot(x, y)
    if isa not in ("avx512", "avx2", "sse2"):
        raise ValueError(f"isa must be 'avx512', 'avx2', 'sse2', 'auto' or None, got {isa!r}")
    n = x.size
    if n == 0:
        return dtype(0)
    limit, shift = _THREADED[dtype]
    threads = 1
    if n > limit:
        threads = min((n + (1 << shift) - 1) >> shift, get_intra_op_threads() if num_threads is None else num_threads)
    if threads <= 1:
        return dtype(_kernel(x, y, isa))
    if isa == "sse2":  # its thread split is not reproduced (module docstring)
        return np.dot(x, y)
    q, extra = divmod(n, threads)
    total, start = None, 0
    for i in range(threads):
        size = q + 1 if i < extra else q
        part = dtype(_kernel(x[start:start + size], y[start:start + size], isa))
        total = part if total is None else dtype(total + part)
        start += size
    return total
