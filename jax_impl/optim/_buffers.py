"""An optimizer's state buffers, made as torch's ``torch.zeros_like(p, memory_format=torch.preserve_format)``
and ``torch.full_like`` make them.

``jnp.zeros_like(p)`` outside a trace is a computation of its own, compiled once for every shape and dtype it
meets (some tens of milliseconds each on a small CPU): an optimizer's ``init`` over a model's parameters would
compile one per distinct parameter shape, in every fresh process, before the first step. A buffer for a
concrete array on one CPU device is instead filled on the host and placed where the parameter lies: the same
values, shape, dtype and device, and no compile. Inside a trace (``init`` under ``jax.jit`` or
``jax.eval_shape``, where a host array would become a constant of the program), for a parameter spread over
several devices or on an accelerator (where the host fill would cross to the device), or a weakly typed one,
``jnp``'s own functions run.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl._constants import host_route, torch_fill_value

__all__ = ["full_like", "zeros", "zeros_like"]


def _on_host_route(p: Any) -> bool:
    """A concrete, strongly typed ``jax.Array`` on one CPU device, outside any trace."""
    if not (isinstance(p, jax.Array) and not isinstance(p, jax.core.Tracer) and not p.weak_type):
        return False
    devices = p.sharding.device_set
    return len(devices) == 1 and next(iter(devices)).platform == "cpu" and host_route()


def _placed_like(host: np.ndarray, p: jax.Array) -> jax.Array:
    """``host`` on ``p``'s device, committed to it as ``p`` is (a jitted step's cache tells the two apart: a
    committed buffer beside uncommitted outputs of the step would compile it again), with ``p``'s sharding
    where the shapes agree."""
    if not getattr(p, "committed", True):
        return jax.device_put(host)
    return jax.device_put(host, p.sharding if host.shape == p.shape else next(iter(p.sharding.device_set)))


def full_like(p: Any, value: float) -> jax.Array:
    """``torch.full_like(p, value)``: a fresh buffer of ``p``'s shape, dtype and device, every element ``value``
    (converted as torch's ``fill_`` converts it:
    :func:`jax_impl._constants.torch_fill_value`)."""
    value = torch_fill_value(value, p.dtype)
    if isinstance(value, jax.Array) or not _on_host_route(p):
        return jnp.full_like(p, value)
    return _placed_like(np.full(p.shape, value, dtype=p.dtype), p)


def zeros_like(p: Any) -> jax.Array:
    """``torch.zeros_like(p)``: a fresh zero buffer of ``p``'s shape, dtype and device."""
    if not _on_host_route(p):
        return jnp.zeros_like(p)
    return _placed_like(np.zeros(p.shape, p.dtype), p)


def zeros(shape: tuple[int, ...], dtype: Any, like: Any) -> jax.Array:
    """``torch.zeros(shape, dtype=dtype, device=like.device)``: a fresh zero buffer on ``like``'s device."""
    if not _on_host_route(like):
        return jnp.zeros(shape, dtype)
    return _placed_like(np.zeros(shape, dtype), like)
