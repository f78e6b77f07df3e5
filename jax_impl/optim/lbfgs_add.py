"""``x.add(y, alpha=alpha)`` of two contiguous 1-D float64/float32 CPU tensors, bit for bit, on the host.

torch's CPU ``add`` with an ``alpha`` is ``vec::fmadd(y, alpha, x)``
(``aten/src/ATen/native/ufunc/add.h``), its scalar tail contracted by the
compiler the same way: every element is ``fma(y, alpha, x)``, rounded once.
``torch.optim.LBFGS`` adds vectors this way ``2 * history_size`` times an
iteration (the two-loop recursion), so the price of one add sets the price of
its step.

float32 adds are :func:`jax_impl.random.fma.fma32` (a float64 sum and a tie
check: a few NumPy passes). float64 has no wider type to sum in, and its exact
emulation, :func:`jax_impl.random.fma.fma64`, takes some forty passes over
the vectors; long float64 vectors are added instead by ``x + alpha * y``
compiled by XLA on the CPU, where LLVM contracts it into the hardware FMA (the
contraction :class:`jax_impl.kernels.TorchOps` relies on), one pass however
the operands are passed. XLA:CPU runs with denormals flushed (subnormal
operands read as zero, subnormal results written as zero), which torch does
not, so the compiled call also reports whether any operand is subnormal or
any result is zero where its operands are not; such calls are computed again
by the emulation. Where the compiled route does not give the emulation's bits
on a probe (a CPU without FMA instructions), the emulation is used throughout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl.random.fma import fma32, fma64

__all__ = ["torch_add"]

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
    """
    alpha = np.asarray(alpha, x.dtype)
    compiled = _compiled() if x.dtype == np.float64 and x.size >= MIN_COMPILED_SIZE else None
    if compiled is not None:
        result, exact = compiled(x, alpha, y)
        if exact:
            return result
    return _emulated(x, alpha, y)


def _emulated(x: np.ndarray, alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
    fma = fma64 if x.dtype == np.float64 else fma32
    return fma(y, alpha, x).astype(x.dtype)


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

    rng = np.random.default_rng(0)
    y = rng.standard_normal(MIN_COMPILED_SIZE)
    for alpha in (0.3, -2.5):
        x = -y * alpha * (1 + rng.standard_normal(y.size) * 1e-3)  # cancellations: where FMA shows
        x[:2], y[:2] = 0, [0, -0.0]
        alpha = np.asarray(alpha)
        try:
            got, exact = compiled(x, alpha, y)
        except Exception:  # noqa: BLE001 - any failure of the compiled route: the emulation stays
            return None
        expected = _emulated(x, alpha, y)
        if not exact or got.dtype != np.float64 or got.tobytes() != expected.tobytes():
            return None
    return compiled
