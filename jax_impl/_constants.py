"""Constant arrays (a layer's ones and zeros, an initial fill) made as torch makes them, without compiling a
computation for each shape.

Outside a trace, ``jnp.full`` is a computation of its own, compiled for every shape it meets (some milliseconds
to tens of them each on a small CPU): a model's norms of many widths, or an optimizer's buffers, would compile
one per shape before the first step. On the CPU the array is filled on the host and placed on the device
instead. Inside a trace (``nnx.eval_shape`` of a model, a jitted init), where a host array would become a
constant of the traced program allocated in full, and on an accelerator, where the fill would cross from the
host, ``jnp.full`` runs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl._tracing import tracing

__all__ = ["full", "host_route", "torch_fill_value"]


def torch_fill_value(value: Any, dtype: Any) -> Any:
    """``value`` as torch's ``fill_`` converts a Python number for ``dtype``: to float first, then to a 16-bit
    float type (``c10::Half(float)``, ``c10::BFloat16(float)``), where NumPy's direct conversion of the
    double can round the other way."""
    dt = np.dtype(dtype)
    if dt.kind in "fV" and dt.itemsize == 2 and isinstance(value, (int, float, np.floating)):
        return np.asarray(np.float32(value)).astype(dt)
    return value


def host_route() -> bool:
    """Whether a constant made here is filled on the host: jax's default backend is the CPU and no trace is
    active."""
    return jax.default_backend() == "cpu" and not tracing()


def full(shape: int | tuple[int, ...], value: Any, dtype: Any) -> jax.Array:
    """``torch.full(shape, value, dtype=dtype)`` on jax's default device, ``value`` converted as torch's
    ``fill_`` converts it."""
    dtype = jnp.dtype(dtype)
    value = torch_fill_value(value, dtype)
    if isinstance(value, jax.Array) or not host_route():
        return jnp.full(shape, value, dtype)
    return jax.device_put(np.full(shape, value, dtype=dtype))
