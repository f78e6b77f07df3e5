"""A torch model's hooks and parametrizations, as the port reads them.

``torch.fx`` does not run hooks: a traced layer is one ``call_module`` node, a traced-through module's
``forward`` is inlined, and neither records what a forward pre-hook or a forward hook would have done. So
the port reproduces the hooks it knows and refuses every other one, naming it, rather than writing a twin
that silently leaves one out:

- ``torch.nn.utils.spectral_norm`` / ``weight_norm`` (``SpectralNorm`` / ``WeightNorm`` forward pre-hooks)
  on a ``torch.nn`` layer become the same calls of ``jax_impl.nn.utils`` around the twin's layer;
- ``torch.nn.utils.prune``'s pre-hooks (any method, or several in a ``PruningContainer``) on a ``torch.nn``
  layer become ``jax_impl.nn.utils.prune.identity``: the mask itself comes with the state dict
  (``weight_mask``);
- ``torch.nn.utils.parametrizations.spectral_norm`` / ``weight_norm`` (one ``_SpectralNorm`` or
  ``_WeightNorm`` parametrization per tensor) on a ``torch.nn`` layer become
  ``jax_impl.nn.utils.parametrizations``' calls;
- any other hook (forward, backward, global, or these on a module the trace goes through) and any other
  parametrization raise :class:`~parity.port.errors.PortError`.
"""

from __future__ import annotations

import copy

import torch
from torch.nn.modules import module as torch_module
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import _SpectralNorm, _WeightNorm
from torch.nn.utils.prune import BasePruningMethod
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

from parity.port.errors import FALLBACK, PortError

__all__ = ["check_hooks", "computed_tensor_name", "copy_model", "normalization_source", "unparametrized_type"]

_KNOWN_PRE_HOOKS = (SpectralNorm, WeightNorm, BasePruningMethod)
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_MODULE_HOOKS = ("_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


def unparametrized_type(module: torch.nn.Module) -> type:
    """``module``'s class before torch's parametrize made it ``Parametrized<Class>``."""
    return parametrize.type_before_parametrizations(module)


def _hook_name(hook) -> str:
    return getattr(hook, "__name__", None) or type(hook).__name__


def _inside_layers(model: torch.nn.Module, is_leaf) -> dict[str, str]:
    """``{path: layer path}`` for every module below a layer the trace keeps whole (``out_proj`` of a
    ``MultiheadAttention``, ``linear1`` of a ``TransformerEncoderLayer``)."""
    inside: dict[str, str] = {}
    for path, module in model.named_modules():
        if path in inside or not is_leaf(module):
            continue
        for sub, _ in module.named_modules(prefix=path):
            if sub != path:
                inside[sub] = path or "the model"
    return inside


def check_hooks(model: torch.nn.Module, is_leaf) -> None:
    """Raise ``PortError`` for a hook or parametrization of ``model`` the port cannot reproduce.

    Args:
      model: the torch model.
      is_leaf: ``is_leaf(module)``, whether the trace keeps ``module`` as one layer.
    """
    for name in _GLOBAL_HOOKS:
        hooks = getattr(torch_module, name, {})
        if hooks:
            raise PortError(f"cannot port {type(model).__name__}: a global module hook is registered "
                            f"({_hook_name(next(iter(hooks.values())))}, torch.nn.modules.module.{name}); torch.fx "
                            f"does not run hooks. Remove it before porting. Fallback: {FALLBACK}")
    inside = _inside_layers(model, is_leaf)
    for path, module in model.named_modules():
        where = path or "the model"
        if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():
            continue  # its own pre-hook materialises it; the layer's port says to run the model first
        if path in inside and (module._forward_pre_hooks or parametrize.is_parametrized(module)):
            raise PortError(f"cannot port {where} ({unparametrized_type(module).__name__}): it is normalised, "
                            f"pruned or parametrized inside {inside[path]}, a torch.nn layer the port rebuilds from "
                            f"its constructor arguments. Fallback: {FALLBACK}")
        for name in _MODULE_HOOKS:
            hooks = getattr(module, name, {})
            if hooks:
                kind = name.strip("_").replace("_", " ")[:-1]
                raise PortError(f"cannot port {where} ({unparametrized_type(module).__name__}): it has a {kind} "
                                f"({_hook_name(next(iter(hooks.values())))}), and torch.fx does not run hooks. Remove "
                                f"it before porting. Fallback: {FALLBACK}")
        for hook in module._forward_pre_hooks.values():
            if not isinstance(hook, _KNOWN_PRE_HOOKS):
                raise PortError(f"cannot port {where} ({unparametrized_type(module).__name__}): it has a forward pre "
                                f"hook ({_hook_name(hook)}); the port reproduces torch.nn.utils.spectral_norm's, "
                                f"weight_norm's and prune's only. Fallback: {FALLBACK}")
            if not is_leaf(module):
                raise PortError(f"cannot port {where} ({type(module).__name__}): its {type(hook).__name__} hook is on "
                                f"a module the trace goes through; the port reproduces it on torch.nn layers only. "
                                f"Fallback: {FALLBACK}")
        if parametrize.is_parametrized(module):
            if not is_leaf(module):
                raise PortError(f"cannot port {where} ({unparametrized_type(module).__name__}): it is parametrized "
                                f"and the trace goes through it; the port reproduces parametrizations of torch.nn "
                                f"layers only. Fallback: {FALLBACK}")
            for tensor, chain in module.parametrizations.items():
                if len(chain) != 1 or not isinstance(chain[0], (_SpectralNorm, _WeightNorm)):
                    names = ", ".join(type(p).__name__ for p in chain)
                    raise PortError(f"cannot port {where}.{tensor}: its parametrization ({names}) is not one of "
                                    f"torch.nn.utils.parametrizations' spectral_norm and weight_norm. "
                                    f"Fallback: {FALLBACK}")


def _call(function: str, layer: str, arguments: dict, defaults: dict) -> str:
    parts = [f"{key}={value!r}" for key, value in arguments.items() if defaults.get(key, object()) != value]
    return f"{function}({', '.join([layer, *parts])})"


def normalization_source(module: torch.nn.Module, layer: str) -> str:
    """``layer`` (the twin layer's constructor source) wrapped in the normalisations ``module`` carries, their
    arguments left out where torch's defaults give them."""
    transposed = isinstance(module, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d))
    spectral_defaults = {"name": "weight", "n_power_iterations": 1, "eps": 1e-12, "dim": 1 if transposed else 0}
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, SpectralNorm):
            layer = _call("nn.utils.spectral_norm", layer, {"name": hook.name, "n_power_iterations":
                          hook.n_power_iterations, "eps": hook.eps, "dim": hook.dim}, spectral_defaults)
        elif isinstance(hook, BasePruningMethod):  # the mask is the state dict's weight_mask
            layer = f"nn.utils.prune.identity({layer}, {hook._tensor_name!r})"
        elif isinstance(hook, WeightNorm):  # torch keeps dim=None as -1
            layer = _call("nn.utils.weight_norm", layer, {"name": hook.name, "dim": None if hook.dim == -1
                          else hook.dim}, {"name": "weight", "dim": 0})
    if parametrize.is_parametrized(module):
        for tensor, (p,) in module.parametrizations.items():
            if isinstance(p, _SpectralNorm):
                steps = getattr(p, "n_power_iterations", 1)  # a 1-d weight keeps none: it only normalises
                layer = _call("nn.utils.parametrizations.spectral_norm", layer, {"name": tensor, "n_power_iterations":
                              steps, "eps": p.eps, "dim": p.dim}, spectral_defaults)
            else:
                layer = _call("nn.utils.parametrizations.weight_norm", layer, {"name": tensor, "dim": None
                              if p.dim == -1 else p.dim}, {"name": "weight", "dim": 0})
    return layer


def computed_tensor_name(model: torch.nn.Module, tensor) -> str | None:
    """The dotted name (``emb.weight``) under which a known hook of ``model`` keeps ``tensor``, the weight it
    computed before the layer's last call, or ``None``."""
    for path, layer in model.named_modules():
        for hook in layer._forward_pre_hooks.values():
            if isinstance(hook, _KNOWN_PRE_HOOKS):
                name = getattr(hook, "_tensor_name", None) or hook.name
                if layer.__dict__.get(name) is tensor:
                    return f"{path}.{name}" if path else name
    return None


def copy_model(module: torch.nn.Module) -> torch.nn.Module:
    """``copy.deepcopy(module)``, also for a model whose normalisation hooks left a computed tensor on a layer.

    torch's hook forms of ``weight_norm``, ``spectral_norm`` and pruning keep ``module.weight`` as a plain attribute
    holding the last computed weight, a tensor with autograd history that ``deepcopy`` refuses (torch's own
    error). The hook recomputes it before every forward, so the copy gets it detached.
    """
    memo: dict[int, object] = {}
    for layer in module.modules():
        for hook in layer._forward_pre_hooks.values():
            if isinstance(hook, _KNOWN_PRE_HOOKS):
                value = layer.__dict__.get(getattr(hook, "_tensor_name", None) or hook.name)
                if isinstance(value, torch.Tensor) and not value.is_leaf:
                    memo[id(value)] = value.detach().clone()
    return copy.deepcopy(module, memo)
