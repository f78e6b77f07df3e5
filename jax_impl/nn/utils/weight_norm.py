"""``torch.nn.utils.weight_norm`` and ``remove_weight_norm``: the hook form of weight normalisation.

torch (``torch/nn/utils/weight_norm.py``, Salimans and Kingma 2016) replaces the parameter ``weight`` by
``weight_g = norm_except_dim(weight, 2, dim)`` and ``weight_v = weight`` and, before every forward, sets

    ``weight = weight_v * (weight_g / norm_except_dim(weight_v, 2, dim))``   (``torch._weight_norm``)

with the norm of each slice along ``dim`` (``dim=None``: of the whole tensor). torch deprecates this form in
favour of :func:`jax_impl.nn.utils.parametrizations.weight_norm`; models written with it keep its state dict
keys, ``weight_g`` and ``weight_v``, which this form keeps too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

from jax_impl.nn.utils import _weight_hooks
from jax_impl.nn.utils._weight_ops import norm_except_dim, weight_from_norm

__all__ = ["WeightNorm", "remove_weight_norm", "weight_norm"]


@dataclasses.dataclass(frozen=True)
class WeightNorm:
    """torch's ``WeightNorm`` pre-hook: ``module.<name>`` from ``<name>_g`` and ``<name>_v``."""

    name: str = "weight"
    dim: int = 0

    def before_call(self, module: Any) -> None:
        """Nothing: the weight depends on the parameters alone."""

    def compute(self, module: Any):
        """``torch._weight_norm(<name>_v, <name>_g, dim)``."""
        return weight_from_norm(getattr(module, self.name + "_v")[...], getattr(module, self.name + "_g")[...],
                                self.dim)


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """Weight normalisation of ``module.<name>`` as ``torch.nn.utils.weight_norm`` registers it.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>`` as an ``nnx.Param``.
      name: the parameter's name.
      dim: the dimension each norm is taken across (the others are reduced); ``None`` for one norm of the
        whole tensor.

    Returns:
      ``module``, changed in place: parameters ``<name>_g`` (the norms) and ``<name>_v`` (the weight), and
      ``module.<name>`` computed before every call.

    Raises:
      RuntimeError: ``<name>`` already has a weight norm.
    """
    if dim is None:
        dim = -1
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, WeightNorm) and hook.name == name:
            raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
    weight = getattr(module, name, None)
    if not isinstance(weight, nnx.Param):
        raise ValueError(f"`WeightNorm` needs `{name}` to be a parameter of {type(module).__name__}")
    values = weight[...]
    delattr(module, name)
    setattr(module, name + "_g", nnx.Param(norm_except_dim(values, 2, dim)))
    setattr(module, name + "_v", nnx.Param(values))
    _weight_hooks.add_hook(module, WeightNorm(name, dim))
    return module


def remove_weight_norm(module: Any, name: str = "weight") -> Any:
    """Undo :func:`weight_norm`: ``<name>`` becomes a parameter again, holding the computed weight."""
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, WeightNorm) and hook.name == name:
            weight = hook.compute(module)
            _weight_hooks.remove_hook(module, hook)
            delattr(module, name + "_g")
            delattr(module, name + "_v")
            setattr(module, name, nnx.Param(weight))
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {type(module).__name__}")
