"""``torch.nn.LayerNorm``, ``GroupNorm`` and ``RMSNorm`` as ``flax.nnx`` modules.

Attribute names equal torch's ``state_dict`` keys (``weight``, ``bias``;
``None`` where torch registers ``None``), initialised as torch's
``reset_parameters``: weight ones, bias zeros. These inits draw nothing, so
layers built afterwards get torch's numbers from the global stream.
"""

from __future__ import annotations

from flax import nnx

from jax_impl.nn import functional as F
from jax_impl._constants import full
from jax_impl.nn.modules._utils import factory_dtype
from jax_impl.nn.modules.module import Module

__all__ = ["GroupNorm", "LayerNorm", "RMSNorm"]


def _shape_tuple(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(s) for s in normalized_shape)


def _init_over_shape(module, normalized_shape, eps, elementwise_affine: bool, dtype) -> None:
    """LayerNorm's and RMSNorm's shared state: torch's ``normalized_shape`` tuple, ``eps``, and a ``weight``
    of ones over it when ``elementwise_affine`` (else ``None``)."""
    module.normalized_shape = _shape_tuple(normalized_shape)
    module.eps = eps
    module.elementwise_affine = elementwise_affine
    module.weight = nnx.Param(full(module.normalized_shape, 1.0, dtype)) if elementwise_affine else None


class LayerNorm(Module):
    """``torch.nn.LayerNorm``: ``(x - E[x]) / sqrt(Var[x] + eps) * weight + bias`` over the trailing shape.

    Args:
      normalized_shape: trailing shape to normalise over (an int for the last axis).
      eps: added to the biased variance.
      elementwise_affine: learn ``weight`` (ones) and, with ``bias``, ``bias`` (zeros).
      bias: learn ``bias`` (only with ``elementwise_affine``).
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: accepted for a uniform signature; the init draws nothing.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        del rngs
        dtype = factory_dtype(device, dtype)
        _init_over_shape(self, normalized_shape, eps, elementwise_affine, dtype)
        self.bias = nnx.Param(full(self.normalized_shape, 0.0, dtype)) if elementwise_affine and bias else None

    def __call__(self, input):
        return F.layer_norm(input, self.normalized_shape, None if self.weight is None else self.weight[...],
                            None if self.bias is None else self.bias[...], self.eps)


class GroupNorm(Module):
    """``torch.nn.GroupNorm``: normalise ``(N, C, *)`` over groups of ``C // num_groups`` channels.

    Args:
      num_groups: number of groups; ``ValueError`` unless it divides ``num_channels``.
      num_channels: ``C``.
      eps: added to the biased variance.
      affine: learn per-channel ``weight`` (ones) and, with ``bias``, ``bias`` (zeros).
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      bias: learn ``bias`` (only with ``affine``; keyword-only, as in torch).
      rngs: accepted for a uniform signature; the init draws nothing.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, bias: bool = True, rngs: nnx.Rngs | None = None) -> None:
        del rngs
        dtype = factory_dtype(device, dtype)
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self.weight = nnx.Param(full((num_channels,), 1.0, dtype)) if affine else None
        self.bias = nnx.Param(full((num_channels,), 0.0, dtype)) if affine and bias else None

    def __call__(self, input):
        return F.group_norm(input, self.num_groups, None if self.weight is None else self.weight[...],
                            None if self.bias is None else self.bias[...], self.eps)


class RMSNorm(Module):
    """``torch.nn.RMSNorm``: ``x / sqrt(mean(x**2) + eps) * weight`` over the trailing shape.

    Args:
      normalized_shape: trailing shape to normalise over (an int for the last axis).
      eps: added to the mean square; ``None`` is ``finfo(input.dtype).eps``.
      elementwise_affine: learn ``weight`` (ones).
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: accepted for a uniform signature; the init draws nothing.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None, *, rngs: nnx.Rngs | None = None) -> None:
        del rngs
        _init_over_shape(self, normalized_shape, eps, elementwise_affine, factory_dtype(device, dtype))

    def __call__(self, input):
        return F.rms_norm(input, self.normalized_shape, None if self.weight is None else self.weight[...], self.eps)
