"""``torch.distributions.utils``: parameters broadcast together, probabilities and logits as torch converts them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["as_array", "broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits"]


def as_array(value: Any, dtype: Any = None) -> jax.Array:
    """A parameter as a jax array; a Python number becomes torch's default dtype, float32."""
    if isinstance(value, (int, float)):
        return jnp.asarray(value, jnp.float32 if dtype is None else dtype)
    return jnp.asarray(value, dtype)


def broadcast_all(*values: Any) -> list[jax.Array]:
    """``broadcast_all``: numbers take the dtype of the array among them (float32 if none), then one shape."""
    arrays = [v for v in values if not isinstance(v, (int, float))]
    dtype = jnp.result_type(*arrays) if arrays else jnp.float32
    converted = [as_array(v, dtype if isinstance(v, (int, float)) else None) for v in values]
    return list(jnp.broadcast_arrays(*converted))


def clamp_probs(probs: jax.Array) -> jax.Array:
    """``probs`` clamped to ``[eps, 1 - eps]`` of its dtype."""
    eps = jnp.finfo(probs.dtype).eps
    return jnp.clip(probs, eps, 1 - eps)


def probs_to_logits(probs: jax.Array, is_binary: bool = False) -> jax.Array:
    """``log(p) - log1p(-p)`` (binary) or ``log(p)`` of the clamped probabilities."""
    ps = clamp_probs(probs)
    return jnp.log(ps) - jnp.log1p(-ps) if is_binary else jnp.log(ps)


def logits_to_probs(logits: jax.Array, is_binary: bool = False) -> jax.Array:
    """``sigmoid`` (binary) or ``softmax`` over the last dimension."""
    return jax.nn.sigmoid(logits) if is_binary else jax.nn.softmax(logits, axis=-1)


class lazy_property:  # noqa: N801 - named as torch names it
    """``torch.distributions.utils.lazy_property``: computed from the instance on first access, then kept.

    torch's ``Categorical(probs)`` and ``Bernoulli(probs)`` compute ``logits`` only when something reads them
    (``log_prob``, ``entropy``): a policy's ``Categorical(probs).sample()`` takes neither the clamp nor the
    logarithm. Assigning the attribute (the constructor given that parameter) stores it directly. A value
    computed while jax traces a function (a distribution built outside ``jax.jit``, read inside) is not
    kept: it belongs to that trace, and the next read computes it again.
    """

    def __init__(self, compute: Callable[[Any], Any]) -> None:
        self.compute = compute
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = self.compute(instance)
        if not isinstance(value, jax.core.Tracer):
            instance.__dict__[self.name] = value  # later reads find the instance attribute first
        return value


def host(x: jax.Array) -> np.ndarray | None:
    """A parameter's values on the host, for a draw or a check: a differentiated parameter's primal; ``None``
    for one traced by ``jit``/``vmap``, which has no values yet (its checks are skipped, its draws refused)."""
    while isinstance(x, jax.core.Tracer):
        primal = getattr(x, "primal", None)
        if primal is None:
            return None
        x = primal
    return np.asarray(x)
