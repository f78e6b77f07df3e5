"""``torch.distributions.Bernoulli``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.distributions.utils import broadcast_all, host, lazy_property, logits_to_probs, probs_to_logits
from jax_impl.random import Generator

__all__ = ["Bernoulli"]


class Bernoulli(Distribution):
    """Bernoulli(probs), or from ``logits`` (``probs = sigmoid(logits)``).

    ``sample`` is ``torch.bernoulli(probs.expand(shape))``: torch's tensor kernel, one uniform per element
    in C order (53 bits for float64 probabilities, 24 for float32), ``1`` where it is below ``p``.
    ``log_prob`` is ``-binary_cross_entropy_with_logits(logits, value)``.
    """

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        param = probs if probs is not None else logits
        (value,) = broadcast_all(param)
        self._is_probs = probs is not None
        if self._is_probs:
            self.probs = value
        else:
            self.logits = value
        super().__init__(() if isinstance(param, (int, float)) else value.shape, validate_args=validate_args)
        if self._is_probs:
            self._check("probs", self.probs, lambda p: (p >= 0) & (p <= 1), "Interval(lower_bound=0.0, upper_bound=1.0)")

    @lazy_property
    def logits(self) -> jax.Array:
        """``log(p) - log1p(-p)`` of the clamped probabilities, computed when first read (torch's lazy property)."""
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> jax.Array:
        """``sigmoid`` of the logits, computed when first read (torch's lazy property)."""
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def mean(self) -> jax.Array:
        return self.probs

    @property
    def variance(self) -> jax.Array:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.probs)
        return jnp.asarray(gen.bernoulli_p(host(self.probs), self._extended_shape(sample_shape)))

    def log_prob(self, value: Any) -> jax.Array:
        logits, value = jnp.broadcast_arrays(self.logits, jnp.asarray(value, self.logits.dtype))
        return -(jnp.maximum(logits, 0) - logits * value + jnp.log1p(jnp.exp(-jnp.abs(logits))))

    def entropy(self) -> jax.Array:
        logits = self.logits
        return jnp.maximum(logits, 0) - logits * self.probs + jnp.log1p(jnp.exp(-jnp.abs(logits)))
