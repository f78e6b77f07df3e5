"""``torch.distributions.Normal``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.distributions.utils import broadcast_all, host
from jax_impl.random import Generator

__all__ = ["Normal"]


class Normal(Distribution):
    """N(loc, scale^2), torch's draws: ``sample`` is ``torch.normal(loc, scale)`` of the extended shape
    (standard normals, ``* scale``, ``+ loc``), ``rsample`` is ``loc + eps * scale`` with
    ``eps = empty(shape).normal_()``.

    Args:
      loc: the mean (number or array).
      scale: the standard deviation, ``> 0``.
      validate_args: check ``scale > 0`` (torch's default).
    """

    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        scalar = isinstance(loc, (int, float)) and isinstance(scale, (int, float))
        super().__init__(() if scalar else self.loc.shape, validate_args=validate_args)
        self._check("scale", self.scale, lambda v: v > 0, "GreaterThan(lower_bound=0.0)")

    @property
    def mean(self) -> jax.Array:
        return self.loc

    @property
    def stddev(self) -> jax.Array:
        return self.scale

    @property
    def variance(self) -> jax.Array:
        return self.scale**2

    def sample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.loc, self.scale)
        shape = self._extended_shape(sample_shape)
        loc, scale = np.broadcast_to(host(self.loc), shape), np.broadcast_to(host(self.scale), shape)
        eps = gen.normal(shape, 0.0, 1.0, loc.dtype)
        return jnp.asarray((eps * scale).astype(loc.dtype) + loc)

    def rsample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.loc, self.scale)
        eps = jnp.asarray(gen.normal(self._extended_shape(sample_shape), 0.0, 1.0, self.loc.dtype))
        return self.loc + eps * self.scale

    def log_prob(self, value: Any) -> jax.Array:
        """``-(value - loc)^2 / (2 var) - log(scale) - log(sqrt(2 pi))``."""
        var = self.scale**2
        return -((jnp.asarray(value) - self.loc) ** 2) / (2 * var) - jnp.log(self.scale) - math.log(
            math.sqrt(2 * math.pi))

    def cdf(self, value: Any) -> jax.Array:
        return 0.5 * (1 + jax.scipy.special.erf((jnp.asarray(value) - self.loc) * (1 / self.scale) / math.sqrt(2)))

    def entropy(self) -> jax.Array:
        return 0.5 + 0.5 * math.log(2 * math.pi) + jnp.log(self.scale)
