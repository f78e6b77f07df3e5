"""``torch.nn.utils.spectral_norm`` and ``remove_spectral_norm``: the hook form of spectral normalisation.

torch (``torch/nn/utils/spectral_norm.py``, Miyato et al. 2018) replaces the parameter ``weight`` by
``weight_orig`` (the same values) and two buffers ``weight_u`` (``h``) and ``weight_v`` (``w``), where
``W = weight_orig`` seen as an ``h x w`` matrix with ``dim`` as its rows. Before every forward a pre-hook sets

    in training mode, ``n_power_iterations`` times, with no gradient:
        ``v = normalize(W^T u)``, ``u = normalize(W v)`` (written into the buffers)
    ``sigma = u . (W v)``,   ``weight = weight_orig / sigma``

so gradients flow through ``W`` in both places and ``u``, ``v`` are constants; eval mode uses the stored
``u``, ``v``. The state dict keys are ``weight_orig``, ``weight_u``, ``weight_v``, as torch's.

Read outside a call, ``module.weight`` is ``weight_orig / sigma`` with the buffers' current ``u``, ``v``:
after a call that is the weight the call used, as torch's attribute; before the first call torch's attribute
still holds ``weight_orig`` itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

from jax_impl.nn._functional_normalization import normalize
from jax_impl.nn.init import normal_
from jax_impl.nn.modules.module import Buffer
from jax_impl.nn.utils import _weight_hooks
from jax_impl.nn.utils._weight_ops import default_spectral_dim, power_iteration, reshape_weight_to_matrix, sigma

__all__ = ["SpectralNorm", "remove_spectral_norm", "spectral_norm"]


@dataclasses.dataclass(frozen=True)
class SpectralNorm:
    """torch's ``SpectralNorm`` pre-hook: recomputes ``module.<name>`` from ``<name>_orig``, ``_u``, ``_v``."""

    name: str = "weight"
    n_power_iterations: int = 1
    dim: int = 0
    eps: float = 1e-12

    def _parts(self, module: Any):
        weight = getattr(module, self.name + "_orig")[...]
        return weight, getattr(module, self.name + "_u"), getattr(module, self.name + "_v")

    def before_call(self, module: Any) -> None:
        """The power iteration of a training-mode forward, written into the ``_u``/``_v`` buffers."""
        if not module.training:
            return
        weight, u, v = self._parts(module)
        u[...], v[...] = power_iteration(reshape_weight_to_matrix(weight, self.dim), u[...], v[...],
                                         self.n_power_iterations, self.eps, v_first=True)

    def compute(self, module: Any):
        """``weight_orig / (u . (W v))`` with the buffers' current ``u``, ``v``."""
        weight, u, v = self._parts(module)
        return weight / sigma(reshape_weight_to_matrix(weight, self.dim), u[...], v[...])


def spectral_norm(module: Any, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Any:
    """Spectral normalisation of ``module.<name>`` as ``torch.nn.utils.spectral_norm`` registers it.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>`` as an ``nnx.Param``.
      name: the parameter's name.
      n_power_iterations: power-method steps per training-mode call (positive).
      eps: the normalisations' ``eps``.
      dim: the matrix rows' dimension; ``None`` is 1 for ``ConvTranspose{1,2,3}d`` and 0 otherwise, as torch's.

    Returns:
      ``module``, changed in place: ``<name>_orig`` (the parameter), buffers ``<name>_u`` and ``<name>_v``
      drawn as torch draws them (``normal_(0, 1)`` from the global stream, ``u`` first, each normalised), and
      ``module.<name>`` computed before every call.

    Raises:
      ValueError: ``n_power_iterations`` is not positive or the parameter is ``None``.
      RuntimeError: ``<name>`` is already spectrally normalised.
    """
    if dim is None:
        dim = default_spectral_dim(module)
    if n_power_iterations <= 0:
        raise ValueError("Expected n_power_iterations to be positive, but got "
                         f"n_power_iterations={n_power_iterations}")
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter {name}")
    weight = getattr(module, name, None)
    if weight is None:
        raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
    if not isinstance(weight, nnx.Param):
        raise ValueError(f"`SpectralNorm` needs `{name}` to be a parameter of {type(module).__name__}")
    hook = SpectralNorm(name, n_power_iterations, dim, eps)
    h, w = reshape_weight_to_matrix(weight[...], dim).shape
    dtype = weight[...].dtype
    u = normalize(normal_(None, (h,), dtype), dim=0, eps=eps)
    v = normalize(normal_(None, (w,), dtype), dim=0, eps=eps)
    delattr(module, name)
    setattr(module, name + "_orig", weight)
    setattr(module, name + "_u", Buffer(u))
    setattr(module, name + "_v", Buffer(v))
    _weight_hooks.add_hook(module, hook)
    return module


def remove_spectral_norm(module: Any, name: str = "weight") -> Any:
    """Undo :func:`spectral_norm`: ``<name>`` becomes a parameter again, holding the normalised weight
    (computed without a power iteration), as ``torch.nn.utils.remove_spectral_norm``."""
    for hook in _weight_hooks.hooks(module):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            weight = hook.compute(module)
            _weight_hooks.remove_hook(module, hook)
            for suffix in ("_u", "_v", "_orig"):
                delattr(module, name + suffix)
            setattr(module, name, nnx.Param(weight))
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {type(module).__name__}")
