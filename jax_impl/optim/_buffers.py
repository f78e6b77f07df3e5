"""An optimizer's state buffers, made as torch's ``torch.zeros_like(p, memory_format=torch.preserve_format)``
and ``torch.full_like`` make them.

``jnp.zeros_like(p)`` outside a trace is a computation of its own, compiled
once for every shape and dtype it meets (some tens of milliseconds each on a
small CPU): an optimizer's ``init`` over a model's parameters compiled one
per distinct parameter shape, in every fresh process, before the first step.
A buffer for a concrete array on one device is instead filled on the host
and placed where the parameter lies: the same values, shape, dtype and
device, and no compile. Inside a trace (``init`` under ``jax.jit``), for a
parameter spread over several devices, or a weakly typed one, ``jnp``'s own
functions run, as before.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["full_like", "zeros", "zeros_like"]


def _on_one_device(p: Any) -> bool:
    """A concrete, strongly typed ``jax.Array`` on a single device."""
    return (isinstance(p, jax.Array) and not isinstance(p, jax.core.Tracer) and not p.weak_type
            and len(p.sharding.device_set) == 1)


def _placed_like(host: np.ndarray, p: jax.Array) -> jax.Array:
    """``host`` on ``p``'s device, committed to it as ``p`` is (a jitted step's cache tells the two apart: a
    committed buffer beside uncommitted outputs of the step would compile it again)."""
    return jax.device_put(host, p.sharding if getattr(p, "committed", True) else None)


def full_like(p: Any, value: float) -> jax.Array:
    """``torch.full_like(p, value)``: a fresh buffer of ``p``'s shape, dtype and device, every element ``value``
    (cast to the dtype as ``jnp.full_like`` casts it)."""
    if not _on_one_device(p):
        return jnp.full_like(p, value)
    return _placed_like(np.full(p.shape, value, dtype=p.dtype), p)


def zeros_like(p: Any) -> jax.Array:
    """``torch.zeros_like(p)``: a fresh zero buffer of ``p``'s shape, dtype and device."""
    if not _on_one_device(p):
        return jnp.zeros_like(p)
    return _placed_like(np.zeros(p.shape, p.dtype), p)


def zeros(shape: tuple[int, ...], dtype: Any, like: Any) -> jax.Array:
    """``torch.zeros(shape, dtype=dtype, device=like.device)``: a fresh zero buffer on ``like``'s device."""
    if not _on_one_device(like):
        return jnp.zeros(shape, dtype)
    return _placed_like(np.zeros(shape, dtype), like)
