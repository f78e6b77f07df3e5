"""``torch.nn.Linear``, ``torch.nn.Bilinear`` and ``torch.nn.Identity`` as ``flax.nnx`` modules."""

from __future__ import annotations

import math

import jax
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.module import Module

__all__ = ["Bilinear", "Identity", "Linear"]


class Identity(Module):
    """``torch.nn.Identity``: returns its input; constructor arguments are ignored, as in torch."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, input):
        return input


class Linear(Module):
    """``torch.nn.Linear``: ``y = x @ weight.T + bias``.

    ``weight`` is ``(out_features, in_features)`` and ``bias`` ``(out_features,)``
    (``None`` when ``bias=False``), initialised as torch's ``reset_parameters``:
    ``kaiming_uniform_(weight, a=sqrt(5))`` = U(-1/sqrt(in), 1/sqrt(in)) and
    ``bias ~ U(-1/sqrt(in), 1/sqrt(in))``.

    Args:
      in_features: size of each input sample.
      out_features: size of each output sample.
      bias: learn an additive bias.
      device: only ``None`` / ``"cpu"`` (jax places arrays itself).
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream (``jax_impl.random.manual_seed``), so the weights equal
        torch's after the same seed.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
        *, rngs: nnx.Rngs | None = None,
    ) -> None:
        dtype = factory_dtype(device, dtype)
        self.in_features = in_features
        self.out_features = out_features
        params = init.linear_default(init_key(rngs), out_features, in_features, bias, dtype)
        self.weight = nnx.Param(params["weight"])
        self.bias = nnx.Param(params["bias"]) if bias else None

    def __call__(self, input):
        return F.linear(input, self.weight[...], None if self.bias is None else self.bias[...])


class Bilinear(Module):
    """``torch.nn.Bilinear``: ``y = x1^T A x2 + b``, ``y[..., k] = sum_ij x1[..., i] A[k, i, j] x2[..., j] + b[k]``.

    ``weight`` is ``(out_features, in1_features, in2_features)`` and ``bias``
    ``(out_features,)`` (``None`` when ``bias=False``), both initialised as
    torch's ``reset_parameters``: ``U(-1/sqrt(in1_features), 1/sqrt(in1_features))``,
    the weight drawn first (row-major), then the bias.

    Args:
      in1_features: size of each first input sample; ``ValueError`` unless ``> 0``, as torch.
      in2_features: size of each second input sample.
      out_features: size of each output sample.
      bias: learn an additive bias.
      device: only ``None`` / ``"cpu"`` (jax places arrays itself).
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream, so the weights equal torch's after the same seed.
    """

    def __init__(
        self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
        *, rngs: nnx.Rngs | None = None,
    ) -> None:
        dtype = factory_dtype(device, dtype)
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        if in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={in1_features})")
        bound = 1 / math.sqrt(in1_features)
        key = init_key(rngs)
        # One stream, weight then bias, as torch's two uniform_ calls; a jax key is split between them.
        k_w, k_b = (key, key) if key is None else jax.random.split(key)
        self.weight = nnx.Param(init.uniform_(k_w, (out_features, in1_features, in2_features), dtype, -bound, bound))
        self.bias = nnx.Param(init.uniform_(k_b, (out_features,), dtype, -bound, bound)) if bias else None

    def __call__(self, input1, input2):
        return F.bilinear(input1, input2, self.weight[...], None if self.bias is None else self.bias[...])
