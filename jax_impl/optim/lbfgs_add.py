"""``x.add(y, alpha=alpha)`` of two contiguous 1-D float64/float32 CPU tensors, bit for bit, on the host.

torch's CPU ``add`` with an ``alpha`` is ``vec::fmadd(y, alpha, x)``
(``aten/src/ATen/native/ufunc/add.h``), its scalar tail contracted by the
compiler the same way: every element is ``fma(y, alpha, x)``, rounded once.
``torch.optim.LBFGS`` adds vectors this way ``2 * history_size`` times an
iteration (the two-loop recursion), so the price of one add sets the price of
its step.

Three routes give those bits, the first that holds on this machine taking the add:

1. **BLAS's axpy** (``y := alpha * x + y``, SciPy's ``daxpy``/``saxpy``, where SciPy's BLAS is OpenBLAS):
   OpenBLAS's x86 kernels compute their blocks of 16 or 32 elements with FMA
   instructions, one rounding each, but the elements past the last block in
   plain C (a product, then a sum), and above 10,000 elements OpenBLAS cuts
   the vector between threads, each part with its own such tail; and
   ``alpha == 0`` returns before computing anything (torch still adds
   ``0 * y``, which is NaN for an infinite ``y``). So the vector is passed in
   parts of at most :data:`BLAS_PART` elements, each a multiple of 64, the
   last few elements padded to 64 in a buffer of their own, and a zero
   ``alpha`` takes another route. Subnormals are kept (the calling thread
   does not flush them). About 10 microseconds for 32k float64 elements,
   against torch's 6.
2. **XLA** (float64 vectors of :data:`MIN_COMPILED_SIZE` elements or more):
   ``x + alpha * y`` compiled by XLA on the CPU, where LLVM contracts it into
   the hardware FMA (the contraction :class:`jax_impl.kernels.TorchOps` relies
   on). XLA:CPU runs with denormals flushed, so the compiled call also reports
   whether any operand is subnormal or any result is zero where its operands
   are not; such calls are computed again by the emulation.
3. **The exact emulation** in NumPy (:func:`jax_impl.random.fma.fma32`, a
   float64 sum and a tie check; :func:`jax_impl.random.fma.fma64`, some forty
   passes over the vectors).

Each of the first two is probed at first use against the emulation (sums whose
product's rounding decides them, signed zeros, subnormals, infinities and
NaNs, lengths around its parts' edges) and not used where any bit differs (a
BLAS whose kernels do not fuse, a CPU without FMA instructions).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.random.fma import fma32, fma64

__all__ = ["BLAS_PART", "MIN_COMPILED_SIZE", "torch_add"]

# Parts BLAS's axpy is called on: at most OpenBLAS's single-thread size (10,000), a multiple of 64 (its FMA
# blocks are 16 float64 or 32 float32 elements); the last elements are padded to _BLAS_BLOCK.
BLAS_PART = 8192
_BLAS_BLOCK = 64

# Below this many float64 elements the compiled call's fixed price (transfers and dispatch, about 40
# microseconds) exceeds the emulation's passes.
MIN_COMPILED_SIZE = 2048

# The float64 encoding: exponent field, significand field, everything but the sign.
_EXPONENT, _SIGNIFICAND, _MAGNITUDE = 0x7FF0000000000000, 0x000FFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF


def torch_add(x: np.ndarray, alpha, y: np.ndarray) -> np.ndarray:
    """``x.add(y, alpha=alpha)`` as torch's CPU kernel computes it: ``fma(y, alpha, x)`` elementwise.

    Args:
      x, y: 1-D arrays of one dtype, float32 or float64, of one length.
      alpha: a scalar, rounded to that dtype (torch's ``alpha`` of a float tensor).

    Returns:
      A new array of ``x``'s dtype.

    Raises:
      TypeError: ``x`` and ``y`` of different dtypes, or of a dtype other than float32 and float64 (torch
        would promote; LBFGS's vectors never differ).
      ValueError: ``x`` and ``y`` not 1-D vectors of one length.
    """
    if x.dtype != y.dtype or x.dtype not in (np.float32, np.float64):
        raise TypeError(f"torch_add adds float32 or float64 vectors of one dtype, got {x.dtype} and {y.dtype}")
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"torch_add adds 1-D vectors of one length, got shapes {x.shape} and {y.shape}")
    alpha = np.asarray(alpha, x.dtype)
    if alpha != 0 and x.size:  # BLAS skips the whole add for a zero alpha
        blas = _blas(x.dtype.char)
        if blas is not None:
            return blas(x, alpha, y)
    compiled = _compiled() if x.dtype == np.float64 and x.size >= MIN_COMPILED_SIZE else None
    if compiled is not None:
        result, exact = compiled(x, alpha, y)
        if exact:
            return result
    return _emulated(x, alpha, y)


def _emulated(x: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
    fma = fma64 if x.dtype == np.float64 else fma32
    return fma(y, alpha, x).astype(x.dtype)


def _probe_cases(dtype: np.dtype, sizes: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(x, alpha, y)`` cases where a product rounded apart, a flushed denormal or a lost signed zero shows."""
    finfo = np.finfo(dtype)
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, finfo.smallest_subnormal, -finfo.smallest_subnormal * 3,
                        finfo.tiny, finfo.max], dtype)
    cases = []
    for n, alpha in zip(sizes, itertools.cycle((0.3, -2.5, 3.7e5, 1e-3))):
        y = rng.standard_normal(n).astype(dtype)
        x = (-y * dtype.type(alpha) * (1 + rng.standard_normal(n).astype(dtype) * dtype.type(1e-3))).astype(dtype)
        picks = rng.integers(0, n, (2, min(n, 9)))
        x[picks[0]], y[picks[1]] = rng.choice(special, picks.shape[1]), rng.choice(special, picks.shape[1])
        cases.append((x, np.asarray(alpha, dtype), y))
    tiny = np.full(64, finfo.tiny, dtype)  # subnormal results
    cases.append((tiny, np.asarray(-0.75, dtype), tiny.copy()))
    return cases


def _matches_emulation(add: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], dtype: np.dtype,
                       sizes: tuple[int, ...]) -> bool:
    for x, alpha, y in _probe_cases(dtype, sizes):
        got, expected = add(x, alpha, y), _emulated(x, alpha, y)
        if got.dtype != dtype or got.shape != expected.shape:
            return False
        # Bits, NaNs as NaNs: a NaN's payload is the hardware's in torch's add, and may not be the emulation's.
        nan = np.isnan(got)
        if not np.array_equal(nan, np.isnan(expected)) or got[~nan].tobytes() != expected[~nan].tobytes():
            return False
    return True


@functools.lru_cache(maxsize=None)
def _blas(char: str) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """BLAS's axpy for dtype ``char`` (``"d"``, ``"f"``) in FMA-sized parts, or ``None`` where SciPy is
    missing, its BLAS is not OpenBLAS, or the probe finds a bit that is not the emulation's."""
    try:
        import scipy
        from scipy.linalg import blas

        library = scipy.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # noqa: BLE001 - no SciPy, or no account of its BLAS: another route takes the adds
        return None
    if "openblas" not in str(library).lower():
        # The parts below rest on OpenBLAS's rule that an axpy of at most 10,000 elements runs on one thread
        # whatever the thread count; another BLAS may cut a part where a probe did not see it.
        return None
    axpy = {"d": blas.daxpy, "f": blas.saxpy}.get(char)
    if axpy is None:  # no BLAS routine for this dtype
        return None
    dtype = np.dtype(char)

    def add(x: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype, copy=True)  # axpy writes its result into its second vector
        y = np.ascontiguousarray(y, dtype)
        n = out.size
        whole = n - n % _BLAS_BLOCK
        for start in range(0, whole, BLAS_PART):
            axpy(y, out, n=min(BLAS_PART, whole - start), a=alpha, offx=start, offy=start)
        if whole < n:  # the last elements in a block of their own, padded with zeros
            tail_x, tail_y = np.zeros(_BLAS_BLOCK, dtype), np.zeros(_BLAS_BLOCK, dtype)
            tail_x[: n - whole], tail_y[: n - whole] = out[whole:], y[whole:]
            axpy(tail_y, tail_x, a=alpha)
            out[whole:] = tail_x[: n - whole]
        return out

    sizes = (1, 63, 64, 65, 1000, BLAS_PART - 1, BLAS_PART, BLAS_PART + 65, 3 * BLAS_PART + 17, 10_007)
    try:
        return add if _matches_emulation(add, dtype, sizes) else None
    except Exception:  # noqa: BLE001 - any failure of the BLAS route: another route takes the adds
        return None


def _kernel(x: jax.Array, alpha: jax.Array, y: jax.Array) -> jax.Array:
    """``x + alpha * y`` (one FMA per element), and one more element: 1 where no flushed denormal can have
    touched the sum (no subnormal operand, and no zero result of operands not both zero), else 0."""

    def bits(v):  # the encoding: comparisons of the values themselves would see subnormals as zeros
        return lax.bitcast_convert_type(v, jnp.uint64)

    def zero_or_subnormal(v):
        return bits(v) & jnp.uint64(_EXPONENT) == 0

    def subnormal(v):
        return zero_or_subnormal(v) & (bits(v) & jnp.uint64(_SIGNIFICAND) != 0)

    def zero(v):
        return bits(v) & jnp.uint64(_MAGNITUDE) == 0

    result = x + alpha * y
    both_zero = zero(x) & (zero(y) | zero(alpha))
    touched = subnormal(x) | subnormal(y) | subnormal(alpha) | (zero_or_subnormal(result) & ~both_zero)
    return jnp.concatenate([result, (~jnp.any(touched)).astype(result.dtype)[None]])  # one array to fetch


@functools.lru_cache(maxsize=None)
def _compiled() -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, bool]] | None:
    """The compiled float64 add on the CPU device, or ``None`` where it does not match the emulation on a
    probe of sums whose product's rounding decides them."""
    try:
        cpu = jax.local_devices(backend="cpu")[0]
    except RuntimeError:  # pragma: no cover - a JAX without its CPU backend
        return None
    kernel = jax.jit(_kernel)
    # NumPy arguments go to the default device; elsewhere than on the CPU they are put there first.
    place = (lambda *args: args) if jax.default_backend() == "cpu" else (lambda *args: jax.device_put(args, cpu))

    def compiled(x: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, bool]:
        with jax.enable_x64(True), jax.ensure_compile_time_eval():  # a value now, even inside a trace
            out = np.asarray(kernel(*place(x, alpha, y)))
        return out[:-1].copy(), bool(out[-1] == 1)  # a writable array of its own, as the emulation's

    def exact(x: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
        result, ok = compiled(x, alpha, y)
        return result if ok else _emulated(x, alpha, y)

    try:
        if not _matches_emulation(exact, np.dtype(np.float64), (MIN_COMPILED_SIZE, 3 * MIN_COMPILED_SIZE + 5)):
            return None
    except Exception:  # noqa: BLE001 - any failure of the compiled route: the emulation stays
        return None
    return compiled
