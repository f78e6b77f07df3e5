"""``torch.nn.BatchNorm{1,2,3}d`` and ``torch.nn.SyncBatchNorm`` as ``flax.nnx`` modules.

State names equal torch's ``state_dict`` keys: ``weight`` / ``bias``
(``nnx.Param``, absent when ``affine=False``), ``running_mean`` /
``running_var`` / ``num_batches_tracked`` (``nnx.BatchStat``, absent when
``track_running_stats=False``). ``num_batches_tracked`` is int64 under jax
x64 and int32 otherwise (exported to torch as int64).

The forward follows ``torch/nn/modules/batchnorm.py`` ``_BatchNorm.forward``::

    factor = 0 if momentum is None else momentum
    if training and track_running_stats:
        num_batches_tracked += 1
        factor = 1 / num_batches_tracked if momentum is None else momentum
    bn_training = training or (running_mean is None and running_var is None)
    F.batch_norm(x, running stats if (not training or tracking) else None, ...,
                 bn_training, factor, eps)

so all four modes (training x track_running_stats) behave as torch's: eval
without running statistics normalises with the batch statistics. The new
running statistics are written back into the module (also under ``nnx.jit``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import _functional_norm as FN
from jax_impl._constants import full
from jax_impl.nn.modules._utils import factory_dtype
from jax_impl.nn.modules.module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"]


def _counter_dtype():
    return jax.dtypes.canonicalize_dtype(jnp.int64)


class _BatchNorm(Module):
    _expected_dims: tuple[int, ...] = ()
    _dims_text: str = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True,
                 rngs: nnx.Rngs | None = None) -> None:
        del rngs  # BatchNorm's init is deterministic (ones / zeros); accepted for a uniform signature
        dtype = factory_dtype(device, dtype)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.weight = nnx.Param(full((num_features,), 1.0, dtype)) if affine else None
        self.bias = nnx.Param(full((num_features,), 0.0, dtype)) if affine and bias else None
        if track_running_stats:
            self.running_mean = nnx.BatchStat(full((num_features,), 0.0, dtype))
            self.running_var = nnx.BatchStat(full((num_features,), 1.0, dtype))
            self.num_batches_tracked = nnx.BatchStat(full((), 0, _counter_dtype()))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, ``num_batches_tracked`` 0 (``_NormBase.reset_running_stats``)."""
        if self.track_running_stats:
            self.running_mean[...] = jnp.zeros_like(self.running_mean[...])
            self.running_var[...] = jnp.ones_like(self.running_var[...])
            self.num_batches_tracked[...] = jnp.zeros_like(self.num_batches_tracked[...])

    def _check_input_dim(self, x) -> None:
        if x.ndim not in self._expected_dims:
            raise ValueError(f"expected {self._dims_text} input (got {x.ndim}D input)")

    def _factor(self):
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked[...] = self.num_batches_tracked[...] + 1
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / self.num_batches_tracked[...].astype(self.running_mean[...].dtype)
        return factor

    def _stats(self):
        use = not self.training or self.track_running_stats
        rm = self.running_mean[...] if use and self.running_mean is not None else None
        rv = self.running_var[...] if use and self.running_var is not None else None
        return rm, rv

    def _store(self, rm, rv) -> None:
        if self.training and self.track_running_stats:
            self.running_mean[...] = rm
            self.running_var[...] = rv

    def _params(self):
        return (None if self.weight is None else self.weight[...], None if self.bias is None else self.bias[...])

    def __call__(self, input):
        x = jnp.asarray(input)
        self._check_input_dim(x)
        factor = self._factor()
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        rm, rv = self._stats()
        y, rm, rv = FN.batch_norm(x, rm, rv, *self._params(), bn_training, factor, self.eps)
        self._store(rm, rv)
        return y


class BatchNorm1d(_BatchNorm):
    """``torch.nn.BatchNorm1d(num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True)``
    on ``(N, C)`` or ``(N, C, L)``; ``momentum=None`` is the cumulative average over ``num_batches_tracked``."""

    _expected_dims = (2, 3)
    _dims_text = "2D or 3D"


class BatchNorm2d(_BatchNorm):
    """``torch.nn.BatchNorm2d`` on ``(N, C, H, W)`` (arguments as :class:`BatchNorm1d`)."""

    _expected_dims = (4,)
    _dims_text = "4D"


class BatchNorm3d(_BatchNorm):
    """``torch.nn.BatchNorm3d`` on ``(N, C, D, H, W)`` (arguments as :class:`BatchNorm1d`)."""

    _expected_dims = (5,)
    _dims_text = "5D"


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm``: training statistics merged over the replicas of ``axis_name``.

    Inside ``jax.pmap`` / ``jax.vmap`` / ``shard_map`` over ``axis_name`` each
    replica's ``(mean, invstd, count)`` is all-gathered and merged by counts
    in replica order, as torch's ``batch_norm_gather_stats_with_counts``; the
    running variance gets the unbiased global variance. In eval mode, or with
    ``axis_name=None`` (torch: no process group initialised), it is a plain
    BatchNorm. Accepts 2D-5D input like torch.

    Args:
      num_features, eps, momentum, affine, track_running_stats, device, dtype: as torch.
      process_group: only ``None``: name the replica axis with ``axis_name``.
      axis_name: the mapped axis the statistics are merged over.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 axis_name=None, rngs: nnx.Rngs | None = None) -> None:
        if process_group is not None:
            raise NotImplementedError(
                "SyncBatchNorm(process_group=...): torch process groups have no JAX counterpart; "
                "pass axis_name= (the pmap/shard_map axis) instead"
            )
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, rngs=rngs)
        self.axis_name = axis_name

    def _check_input_dim(self, x) -> None:
        if x.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {x.ndim}D input)")

    def __call__(self, input):
        x = jnp.asarray(input)
        self._check_input_dim(x)
        factor = self._factor()
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        rm, rv = self._stats()
        if bn_training and self.training and self.axis_name is not None:
            y, rm, rv = FN.sync_batch_norm(x, rm, rv, *self._params(), factor, self.eps, self.axis_name)
        else:
            y, rm, rv = FN.batch_norm(x, rm, rv, *self._params(), bn_training, factor, self.eps)
        self._store(rm, rv)
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, axis_name=None) -> Module:
        """Replace every ``BatchNorm*d`` inside ``module`` by a :class:`SyncBatchNorm` with the same state.

        Like torch's ``convert_sync_batchnorm``, returns the converted module
        (a new one when ``module`` itself is a BatchNorm).
        """
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            new = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      axis_name=axis_name)
            for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                setattr(new, name, getattr(module, name))
            new.training = module.training
            return new
        for name, child in list(vars(module).items()):
            if isinstance(child, Module):
                converted = cls.convert_sync_batchnorm(child, axis_name)
                if converted is not child:
                    setattr(module, name, converted)
        return module
