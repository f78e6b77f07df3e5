"""``torch.distributions.Distribution``: shapes, ``sample`` through ``rsample``, argument validation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jax_impl.distributions.utils import host
from jax_impl.random import Generator, default_generator

__all__ = ["Distribution"]


class Distribution:
    """The base of every distribution: ``batch_shape``, ``event_shape`` and torch's ``_extended_shape``.

    Args:
      batch_shape: the shape of the batch of distributions.
      event_shape: the shape of one draw of one distribution.
      validate_args: check the parameters' constraints (torch's default: ``True``).
    """

    has_rsample = False

    def __init__(self, batch_shape: Sequence[int] = (), event_shape: Sequence[int] = (),
                 validate_args: bool | None = None) -> None:
        self.batch_shape = tuple(batch_shape)
        self.event_shape = tuple(event_shape)
        self._validate_args = True if validate_args is None else bool(validate_args)

    def _extended_shape(self, sample_shape: Sequence[int] = ()) -> tuple[int, ...]:
        """``sample_shape + batch_shape + event_shape``."""
        return tuple(int(s) for s in sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        """A draw without gradient: torch's ``rsample`` under ``no_grad`` unless a class draws otherwise."""
        return jax.lax.stop_gradient(self.rsample(sample_shape, generator=generator))

    def rsample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sample (torch's has_rsample=False)")

    def _check(self, name: str, value: Any, ok: Callable[[np.ndarray], np.ndarray], constraint: str,
               *others: Any) -> None:
        """torch's parameter validation message, when ``validate_args``: ``ok(values, *other values)`` must hold
        everywhere (skipped for a parameter traced by ``jit``/``vmap``, which has no values yet)."""
        values = [host(v) for v in (value, *others)]
        if any(v is None for v in values) or not getattr(self, "_validate_args", True):
            return
        if not np.all(ok(*values)):
            shape = tuple(np.shape(value))
            raise ValueError(f"Expected parameter {name} (Tensor of shape {shape}) of distribution "
                             f"{type(self).__name__} to satisfy the constraint {constraint}, but found invalid "
                             f"values:\n{np.asarray(value)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={self.batch_shape}, event_shape={self.event_shape})"


def host_generator(generator: Generator | None, *params: Any) -> Generator:
    """The generator a draw uses. Differentiating (``jax.grad``) is fine: the draw happens at each call and is a
    constant of the derivative. Under ``jax.jit`` or ``jax.vmap`` it is refused: a host draw made while
    tracing would be baked into the program, or shared by the whole batch."""
    if any(_staged(p) for p in params):
        raise NotImplementedError(
            "jax_impl.distributions draws torch's numbers on the host, eagerly: sampling under jax.jit or "
            "jax.vmap would reuse one draw; draw outside the traced function and pass the sample in")
    return default_generator if generator is None else generator


def _staged(x: Any) -> bool:
    """Whether ``x`` is traced by anything but forward/reverse differentiation."""
    return host(x) is None
