"""``torch.distributions.Uniform``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.distributions.utils import broadcast_all
from jax_impl.random import Generator

__all__ = ["Uniform"]


class Uniform(Distribution):
    """U[low, high): ``rsample`` is ``low + rand(shape) * (high - low)`` with torch's ``rand``."""

    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        scalar = isinstance(low, (int, float)) and isinstance(high, (int, float))
        super().__init__(() if scalar else self.low.shape, validate_args=validate_args)
        self._check("low", self.low, lambda lo, hi: lo < hi, "LessThan(upper_bound=high)", self.high)

    @property
    def mean(self) -> jax.Array:
        return (self.high + self.low) / 2

    @property
    def variance(self) -> jax.Array:
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.low, self.high)
        rand = jnp.asarray(gen.rand(self._extended_shape(sample_shape), np.dtype(self.low.dtype)))
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value: Any) -> jax.Array:
        value = jnp.asarray(value)
        inside = ((self.low <= value) & (self.high > value)).astype(self.low.dtype)
        return jnp.log(inside) - jnp.log(self.high - self.low)

    def entropy(self) -> jax.Array:
        return jnp.log(self.high - self.low)
