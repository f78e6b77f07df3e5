"""``torch.nn.utils.prune``'s reparametrisation: a pruned tensor is its original times a mask.

torch (``torch/nn/utils/prune.py``) moves the parameter ``weight`` to ``weight_orig``, keeps the mask as the
buffer ``weight_mask`` and, before every forward, sets ``weight = weight_mask.to(weight_orig.dtype) *
weight_orig``, so pruned entries get no gradient through ``weight``. Pruning again multiplies the new mask
into the stored one. This module gives that reparametrisation with torch's keys for a mask you give
(``custom_from_mask``, ``identity``); torch's mask-computing methods (``l1_unstructured``,
``random_unstructured``, ``ln_structured``, ``global_unstructured``, ...) are not provided: compute the mask
(or load torch's ``weight_mask``) and apply it with :func:`custom_from_mask`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import nnx

from jax_impl.nn.modules.module import Buffer
from jax_impl.nn.utils import _weight_hooks

__all__ = ["Pruning", "custom_from_mask", "identity", "is_pruned", "remove"]


@dataclasses.dataclass(frozen=True)
class Pruning:
    """torch's pruning pre-hook: ``module.<name> = <name>_mask * <name>_orig``."""

    name: str = "weight"

    def before_call(self, module: Any) -> None:
        """Nothing: the pruned tensor depends on the parameter and the mask alone."""

    def compute(self, module: Any):
        """``mask.astype(orig.dtype) * orig`` (torch's ``apply_mask``)."""
        orig = getattr(module, self.name + "_orig")[...]
        return getattr(module, self.name + "_mask")[...].astype(orig.dtype) * orig


def _pruning(module: Any, name: str) -> Pruning | None:
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, Pruning) and hook.name == name:
            return hook
    return None


def custom_from_mask(module: Any, name: str, mask: Any) -> Any:
    """Prune ``module.<name>`` by ``mask`` (0 prunes an entry), as ``torch.nn.utils.prune.custom_from_mask``.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>`` as an ``nnx.Param``, or already pruned on it (the
        masks then multiply).
      name: the parameter's name.
      mask: an array of the parameter's shape.

    Returns:
      ``module`` with ``<name>_orig`` (the parameter), the buffer ``<name>_mask`` (in the parameter's dtype,
      as torch's default mask) and ``module.<name>`` computed before every call.

    Raises:
      ValueError: no parameter ``name``, or a mask of another shape.
    """
    hook = _pruning(module, name)
    orig = getattr(module, name + "_orig") if hook is not None else getattr(module, name, None)
    if not isinstance(orig, nnx.Param):
        raise ValueError(f"Parameter '{name}' of module {type(module).__name__} has to be pruned or be a parameter")
    mask = jnp.asarray(mask)
    if mask.shape != orig[...].shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not match parameter {name} of shape "
                         f"{tuple(orig[...].shape)}")
    if hook is not None:
        stored = getattr(module, name + "_mask")
        stored[...] = stored[...] * mask.astype(stored[...].dtype)
        return module
    delattr(module, name)
    setattr(module, name + "_orig", orig)
    setattr(module, name + "_mask", Buffer(mask.astype(orig[...].dtype)))
    _weight_hooks.add_hook(module, Pruning(name))
    return module


def identity(module: Any, name: str) -> Any:
    """Prune nothing, with torch's reparametrisation (``torch.nn.utils.prune.identity``): a mask of ones."""
    hook = _pruning(module, name)
    shape = (getattr(module, name + "_orig") if hook is not None else getattr(module, name))[...].shape
    return custom_from_mask(module, name, jnp.ones(shape))


def is_pruned(module: Any) -> bool:
    """Whether ``module`` or one of its submodules is pruned (``torch.nn.utils.prune.is_pruned``)."""
    return any(isinstance(hook, Pruning) for _, m in nnx.iter_graph(module) if isinstance(m, nnx.Module)
               for hook in _weight_hooks.hooks(m))


def remove(module: Any, name: str) -> Any:
    """Make the pruning permanent: ``<name>`` becomes a parameter holding the pruned values again."""
    hook = _pruning(module, name)
    if hook is None:
        raise ValueError(f"Parameter '{name}' of module {type(module).__name__} has to be pruned before pruning "
                         "can be removed")
    pruned = hook.compute(module)
    orig = getattr(module, name + "_orig")
    _weight_hooks.remove_hook(module, hook)
    delattr(module, name + "_orig")
    delattr(module, name + "_mask")
    orig[...] = pruned
    setattr(module, name, orig)
    return module
