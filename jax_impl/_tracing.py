"""Whether JAX is tracing a function at this point of the program.

Host-side shortcuts (a constant filled in NumPy and placed on the device, instead of ``jnp.zeros``, which
outside a trace is a computation compiled for every shape) are right only outside a trace: inside one
(``jax.jit``, ``jax.eval_shape``, ``nnx.eval_shape``) a host array becomes a constant of the traced program,
allocated in full, where ``jnp.zeros`` is one broadcast, or nothing at all under ``eval_shape``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["tracing"]


def tracing() -> bool:
    """Whether a value made here would be staged into a trace (a ``jax.core.Tracer``) rather than computed.

    Placing a NumPy scalar is one of JAX's primitives: outside a trace it is placed at once, and under a
    staging trace it becomes a tracer (a transformation that evaluates eagerly, such as ``jax.grad`` of
    concrete values, computes it). No computation is compiled either way.
    """
    import jax

    return isinstance(jax.device_put(np.bool_(False)), jax.core.Tracer)
