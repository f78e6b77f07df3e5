"""Force XLA:CPU to compute an elementwise result once and keep it in memory.

XLA fuses cheap elementwise producers into every consumer, recomputing them
per consumer and per element read. For a producer that is a long chain (the
fused-loop convolution's 75 taps, the max pool's window scan) read by several
consumers, or read at several offsets by one (a transposed strided slice),
that multiplies its cost. A ``lax.cond`` whose predicate XLA cannot fold
materializes its branch's result as a buffer; ``lax.optimization_barrier``
does not help, it is removed before fusion (measured, jaxlib 0.10.2).

A value some primitive writes into a buffer of its own (a foreign call such as
the oneDNN convolution) is in memory already; the ``cond`` would only copy it.
Such primitives are named by :func:`results_in_memory`, and
:func:`kept_in_memory` passes their results through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["computed_once", "cotangent_kept_in_memory", "kept_in_memory", "results_in_memory", "runtime_false"]

# Primitives whose results are buffers written by the primitive itself, never fused.
_IN_MEMORY: set[Any] = set()


def runtime_false(x: jax.Array) -> jax.Array:
    """A scalar ``False`` XLA cannot fold: the sign bit of one element of ``x``, shifted out."""
    bits = lax.bitcast_convert_type(x.reshape(-1)[0].astype(jnp.float32), jnp.uint32)
    return lax.shift_right_logical(bits, jnp.uint32(31)) > 1


def computed_once(fn: Callable[..., Any], key: jax.Array, *args: Any) -> Any:
    """``fn(*args)``, materialized: the true branch of a ``lax.cond`` on ``~runtime_false(key)``.

    A concrete ``key`` means the caller runs op by op (eagerly, or the backward pass of an eager
    ``jax.vjp``), where every result is a buffer already: ``fn(*args)`` runs as it is. A ``lax.cond`` there
    would compile anew at every call, its branches being new functions each time.
    """
    if not isinstance(key, jax.core.Tracer):
        return fn(*args)
    out = jax.eval_shape(fn, *args)
    return lax.cond(
        jnp.logical_not(runtime_false(key)), fn,
        lambda *_: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out), *args,
    )


def results_in_memory(*primitives: Any) -> None:
    """Declare that each primitive's result is a buffer it writes itself (a custom call), which
    :func:`kept_in_memory` then leaves as it is, with its tangent and cotangent: only for
    primitives whose derivatives are such calls too."""
    _IN_MEMORY.update(primitives)


def _written_by_call(x: jax.Array) -> bool:
    # The staged equation that produced x, where jax records it (a jaxpr tracer's `parent`); a value
    # of unknown origin (vmapped, or under a jax that does not record it) goes through the cond.
    eqn = getattr(x, "parent", None)
    return getattr(eqn, "primitive", None) in _IN_MEMORY


@jax.custom_jvp
def _kept(x: jax.Array) -> jax.Array:
    return x if _written_by_call(x) else computed_once(lambda a: a, x, x)


@_kept.defjvp
def _kept_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    if _written_by_call(x):
        # The tangent of such a call is the sum of its two linear calls, and their transposes (the
        # calls that read the cotangent) read it from memory too.
        return x, t
    # One cond for both: jax splits it into the primal's and the (linear) tangent's; the latter
    # transposes into a cond that keeps the cotangent in memory too.
    return computed_once(lambda a, b: (a, b), x, x, t)


def kept_in_memory(x: jax.Array) -> jax.Array:
    """``x`` materialized in its logical (row-major) layout, and under differentiation its
    tangent and cotangent too, for a consumer that reads it several times (traced, CPU only)."""
    if not isinstance(x, jax.core.Tracer) or jax.default_backend() != "cpu":
        return x
    return _kept(x)


@jax.custom_jvp
def _cotangent_kept(x: jax.Array) -> jax.Array:
    return x


@_cotangent_kept.defjvp
def _cotangent_kept_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    # The primal passes through; the tangent goes through a cond (its predicate from the primal), whose
    # transpose is a cond that keeps the cotangent in memory.
    return x, computed_once(lambda b: b, x, t)


def cotangent_kept_in_memory(x: jax.Array) -> jax.Array:
    """``x`` unchanged, its cotangent materialized once under reverse mode (traced, CPU only).

    For a value read by several branches whose cotangents add up, such as a residual stream
    (``x = x + f(norm(x))``): the sum of the branches' cotangents is an ``add`` XLA fuses into each of
    its consumers, and the next block's sum reads it, so a stack of blocks recomputes every deeper block's
    sums in each of its fusions (a cost that grows with the square of the depth). Kept in memory at each
    block's input, each sum is computed once.
    """
    if not isinstance(x, jax.core.Tracer) or jax.default_backend() != "cpu":
        return x
    return _cotangent_kept(x)
