"""``torch.distributions.MultivariateNormal``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.distributions.distribution import Distribution, host_generator
from jax_impl.random import Generator

__all__ = ["MultivariateNormal"]


class MultivariateNormal(Distribution):
    """N(loc, L L^T) given ``scale_tril`` L (or ``covariance_matrix``, factored by Cholesky).

    ``rsample`` is torch's ``loc + L @ eps`` with ``eps = empty(shape).normal_()``: the noise is torch's, bit
    for bit; the matrix-vector product agrees with torch's to float rounding.
    """

    has_rsample = True

    def __init__(self, loc: Any, covariance_matrix: Any = None, precision_matrix: Any = None, scale_tril: Any = None,
                 validate_args: bool | None = None) -> None:
        given = sum(v is not None for v in (covariance_matrix, precision_matrix, scale_tril))
        if given != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if precision_matrix is not None:
            raise NotImplementedError("MultivariateNormal(precision_matrix=...): pass scale_tril or covariance_matrix")
        loc = jnp.asarray(loc)
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if scale_tril is not None:
            tril = jnp.asarray(scale_tril)
            if tril.ndim < 2:
                raise ValueError("scale_tril matrix must be at least two-dimensional, with optional leading batch "
                                 "dimensions")
        else:
            cov = jnp.asarray(covariance_matrix)
            if cov.ndim < 2:
                raise ValueError("covariance_matrix must be at least two-dimensional, with optional leading batch "
                                 "dimensions")
            tril = jnp.linalg.cholesky(cov)
        batch_shape = jnp.broadcast_shapes(tril.shape[:-2], loc.shape[:-1])
        self.loc = jnp.broadcast_to(loc, (*batch_shape, loc.shape[-1]))
        self.scale_tril = tril
        super().__init__(batch_shape, (loc.shape[-1],), validate_args=validate_args)
        self._check("scale_tril", tril, lambda t: np.all(np.triu(t, 1) == 0) & np.all(
            np.diagonal(t, axis1=-2, axis2=-1) > 0), "LowerCholesky()")

    @property
    def mean(self) -> jax.Array:
        return self.loc

    @property
    def covariance_matrix(self) -> jax.Array:
        return self.scale_tril @ jnp.swapaxes(self.scale_tril, -1, -2)

    @property
    def variance(self) -> jax.Array:
        return jnp.broadcast_to((self.scale_tril**2).sum(-1), self.batch_shape + self.event_shape)

    def rsample(self, sample_shape: Sequence[int] = (), *, generator: Generator | None = None) -> jax.Array:
        gen = host_generator(generator, self.loc, self.scale_tril)
        eps = jnp.asarray(gen.normal(self._extended_shape(sample_shape), 0.0, 1.0, np.dtype(self.loc.dtype)))
        return self.loc + jnp.einsum("...ij,...j->...i", self.scale_tril, eps)

    def log_prob(self, value: Any) -> jax.Array:
        diff = jnp.asarray(value) - self.loc
        tril = jnp.broadcast_to(self.scale_tril, diff.shape[:-1] + self.scale_tril.shape[-2:])
        m = (jax.scipy.linalg.solve_triangular(tril, diff[..., None], lower=True)[..., 0] ** 2).sum(-1)
        half_log_det = jnp.log(jnp.diagonal(self.scale_tril, axis1=-2, axis2=-1)).sum(-1)
        return -0.5 * (self.event_shape[0] * math.log(2 * math.pi) + m) - half_log_det

    def entropy(self) -> jax.Array:
        half_log_det = jnp.log(jnp.diagonal(self.scale_tril, axis1=-2, axis2=-1)).sum(-1)
        h = 0.5 * self.event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det
        return jnp.broadcast_to(h, self.batch_shape)
