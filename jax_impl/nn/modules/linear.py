"""``torch.nn.Linear`` and ``torch.nn.Identity`` as ``flax.nnx`` modules."""

from __future__ import annotations

from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.module import Module

__all__ = ["Identity", "Linear"]


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
