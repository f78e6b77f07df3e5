"""``torch.distributions.Exponential``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.distributions.utils import broadcast_all
from jax_impl.random import Generator

__all__ = ["Exponential"]


class Exponential(Distribution):
    """Exp(rate): ``rsample`` is ``empty(shape).exponential_() / rate`` (torch's ``-log1p(-u)`` per element)."""

    has_rsample = True

    def __init__(self, rate: Any, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(() if isinstance(rate, (int, float)) else self.rate.shape, validate_args=validate_args)
        self._check("rate", self.rate, lambda r: r > 0, "GreaterThan(lower_bound=0.0)")

    @property
    def mean(self) -> jax.Array:
        return 1 / self.rate

    @property
    def variance(self) -> jax.Array:
        return self.rate ** (-2)

    def rsample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.rate)
        draw = jnp.asarray(gen.exponential(self._extended_shape(sample_shape), 1.0, np.dtype(self.rate.dtype)))
        # The divisor broadcast first: XLA turns a division by a broadcast scalar into a multiplication by its
        # reciprocal, one rounding more than torch's division (38% of float32 quotients differ by an ulp).
        return draw / jnp.broadcast_to(self.rate, draw.shape)

    def log_prob(self, value: Any) -> jax.Array:
        return jnp.log(self.rate) - self.rate * jnp.asarray(value)

    def entropy(self) -> jax.Array:
        return 1.0 - jnp.log(self.rate)
