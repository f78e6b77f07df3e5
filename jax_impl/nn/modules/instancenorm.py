"""``torch.nn.InstanceNorm1d/2d/3d`` (``torch/nn/modules/instancenorm.py``)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl._constants import full
from jax_impl.nn.modules._utils import factory_dtype
from jax_impl.nn.modules.module import Module

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(Module):
    """Per-sample, per-channel normalisation (``affine=False``, ``track_running_stats=False`` by default, as
    torch); with ``track_running_stats`` the running statistics update in training and normalise in eval.
    ``num_batches_tracked`` exists (torch's state dict) but is not advanced, as torch's ``instance_norm``
    leaves it."""

    _no_batch_dim = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True,
                 rngs: nnx.Rngs | None = None) -> None:
        del rngs  # deterministic init (ones / zeros)
        dtype = factory_dtype(device, dtype)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = nnx.Param(full((num_features,), 1.0, dtype)) if affine else None
        # torch's keyword-only `bias`: with affine=True and bias=False only `weight` is learnt.
        self.bias = nnx.Param(full((num_features,), 0.0, dtype)) if affine and bias else None
        if track_running_stats:
            self.running_mean = nnx.BatchStat(full((num_features,), 0.0, dtype))
            self.running_var = nnx.BatchStat(full((num_features,), 1.0, dtype))
            self.num_batches_tracked = nnx.BatchStat(full((), 0, jax.dtypes.canonicalize_dtype(jnp.int64)))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def __call__(self, input):
        x = jnp.asarray(input)
        if x.ndim not in (self._no_batch_dim, self._no_batch_dim + 1):
            raise ValueError(f"expected {self._no_batch_dim}D or {self._no_batch_dim + 1}D input "
                             f"(got {x.ndim}D input)")
        feature_dim = x.ndim - self._no_batch_dim
        if x.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {x.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = x.ndim == self._no_batch_dim
        if unbatched:
            x = x[None]
        use_stats = self.training or not self.track_running_stats
        y, rm, rv = F.instance_norm(
            x, None if self.running_mean is None else self.running_mean[...],
            None if self.running_var is None else self.running_var[...],
            None if self.weight is None else self.weight[...], None if self.bias is None else self.bias[...],
            use_stats, self.momentum if self.momentum is not None else 0.0, self.eps)
        if self.running_mean is not None and use_stats:
            self.running_mean[...] = rm
            self.running_var[...] = rv
        return y[0] if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """``torch.nn.InstanceNorm1d`` on ``(N, C, L)`` or ``(C, L)``."""

    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """``torch.nn.InstanceNorm2d`` on ``(N, C, H, W)`` or ``(C, H, W)`` (fast neural style)."""

    _no_batch_dim = 3


class InstanceNorm3d(_InstanceNorm):
    """``torch.nn.InstanceNorm3d`` on ``(N, C, D, H, W)`` or ``(C, D, H, W)``."""

    _no_batch_dim = 4
