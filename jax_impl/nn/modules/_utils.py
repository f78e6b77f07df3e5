"""Helpers shared by the layer modules: torch's ``_single``/``_pair``/``_triple`` and factory checks."""

from __future__ import annotations

from collections.abc import Iterable

import jax.numpy as jnp


def ntuple(value, n: int) -> tuple:
    """``torch.nn.modules.utils._ntuple``: an iterable passes through as a tuple, a scalar repeats."""
    if isinstance(value, Iterable) and not isinstance(value, str):
        return tuple(value)
    return (value,) * n


def reverse_repeat_tuple(t: tuple, n: int) -> tuple:
    """``torch.nn.modules.utils._reverse_repeat_tuple``: ``(1, 2) -> (2, 2, 1, 1)`` for ``n=2``."""
    return tuple(x for x in reversed(t) for _ in range(n))


def factory_dtype(device, dtype):
    """Resolve torch's ``device=`` / ``dtype=`` factory keywords (default float32)."""
    if device is not None and str(device) != "cpu":
        raise NotImplementedError(
            f"device={device!r}: jax_impl layers are created on jax's default device; move them with jax.device_put"
        )
    return jnp.dtype(jnp.float32 if dtype is None else dtype)


def init_key(rngs):
    """The init key: ``rngs.params()`` if given, else ``None`` = torch's global generator (torch-identical init)."""
    return None if rngs is None else rngs.params()
