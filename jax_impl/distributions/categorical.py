"""``torch.distributions.Categorical``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.distributions.utils import host, lazy_property, logits_to_probs, probs_to_logits
from jax_impl.random import Generator

__all__ = ["Categorical"]


class Categorical(Distribution):
    """A categorical over the last dimension of ``probs`` (normalised) or ``logits`` (``- logsumexp``).

    ``sample(shape)`` is torch's: ``multinomial(probs.reshape(-1, K), prod(shape), replacement=True).T``
    reshaped. One sample per distribution takes ``multinomial``'s exponential path (one ``exponential_``
    draw per element of the whole probability table, ``argmax(p / q)`` per row); several take the
    cumulative-sum path, row by row.
    """

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = jnp.asarray(probs)
            if probs.ndim < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self._check("probs", probs, lambda p: p >= 0, "Simplex()")
            self.probs = probs / probs.sum(-1, keepdims=True)
        else:
            logits = jnp.asarray(logits)
            if logits.ndim < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
        param = self.probs if probs is not None else self.logits
        self._num_events = param.shape[-1]
        super().__init__(param.shape[:-1], validate_args=validate_args)

    @lazy_property
    def logits(self) -> jax.Array:
        """``log`` of the clamped probabilities, computed when first read (torch's lazy property)."""
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self) -> jax.Array:
        """``softmax`` of the logits, computed when first read (torch's lazy property)."""
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return tuple(self.probs.shape)

    def sample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.probs)
        sample_shape = tuple(int(s) for s in sample_shape)
        probs_2d = host(self.probs).reshape(-1, self._num_events)
        samples_2d = gen.multinomial(probs_2d, math.prod(sample_shape), True).T
        return jnp.asarray(np.ascontiguousarray(samples_2d).reshape(self._extended_shape(sample_shape)))

    def log_prob(self, value: Any) -> jax.Array:
        value = jnp.asarray(value).astype(jnp.int32 if not jax.config.jax_enable_x64 else jnp.int64)[..., None]
        value, log_pmf = jnp.broadcast_arrays(value, self.logits)
        return jnp.take_along_axis(log_pmf, value[..., :1], axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        logits = jnp.maximum(self.logits, jnp.finfo(self.logits.dtype).min)
        return -(logits * self.probs).sum(-1)
