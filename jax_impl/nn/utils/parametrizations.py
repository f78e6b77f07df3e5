"""``torch.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as parametrizations.

The parametrization forms of torch (``torch/nn/utils/parametrizations.py``), on
:mod:`jax_impl.nn.utils.parametrize`:

- ``weight_norm``: ``original0 = g = norm_except_dim(weight, 2, dim)``, ``original1 = v = weight``, and
  ``weight = v * (g / norm_except_dim(v, 2, dim))`` (``torch._weight_norm``) on each access;
- ``spectral_norm``: ``original = weight``, buffers ``_u`` (``h``) and ``_v`` (``w``) drawn ``normal_(0, 1)``
  from the global stream and normalised, then 15 power-method steps (``u = normalize(W v)`` first, then
  ``v = normalize(W^H u)``); on each access in training mode ``n_power_iterations`` more steps, with no
  gradient, then ``weight / (u . (W v))``. A 1-d weight is ``normalize(weight, dim=0)``.

State dict keys are torch's: ``parametrizations.weight.original0`` / ``original1`` and
``parametrizations.weight.original`` / ``parametrizations.weight.0._u`` / ``_v``.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from jax_impl.nn._functional_normalization import normalize
from jax_impl.nn.init import normal_
from jax_impl.nn.modules.module import Buffer, Module
from jax_impl.nn.utils import parametrize
from jax_impl.nn.utils._weight_ops import (
    default_spectral_dim,
    norm_except_dim,
    power_iteration,
    reshape_weight_to_matrix,
    sigma,
    weight_from_norm,
)

__all__ = ["spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    """torch's ``_WeightNorm`` parametrization: ``(g, v) -> v * (g / ||v||)`` per slice along ``dim``."""

    def __init__(self, dim: int | None = 0) -> None:
        self.dim = -1 if dim is None else dim

    def __call__(self, weight_g, weight_v):
        return weight_from_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


class _SpectralNorm(Module):
    """torch's ``_SpectralNorm`` parametrization, its ``_u``/``_v`` buffers drawn as torch draws them."""

    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = reshape_weight_to_matrix(weight, self.dim)
            h, w = weight_mat.shape
            u = normal_(None, (h,), weight_mat.dtype)
            v = normal_(None, (w,), weight_mat.dtype)
            self._u = Buffer(normalize(u, dim=0, eps=eps))
            self._v = Buffer(normalize(v, dim=0, eps=eps))
            self._power_method(weight_mat, 15)

    def _power_method(self, weight_mat, n_power_iterations: int) -> None:
        self._u[...], self._v[...] = power_iteration(weight_mat, self._u[...], self._v[...], n_power_iterations,
                                                     self.eps, v_first=False)

    def __call__(self, weight):
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        weight_mat = reshape_weight_to_matrix(weight, self.dim)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        return weight / sigma(weight_mat, self._u[...], self._v[...])

    def right_inverse(self, value):
        return value


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """Weight normalisation of ``module.<name>`` as ``torch.nn.utils.parametrizations.weight_norm``.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>``.
      name: the parameter's name.
      dim: the dimension each norm is taken across; ``None`` for one norm of the whole tensor.

    Returns:
      ``module`` with ``parametrizations.<name>.original0`` (``g``) and ``original1`` (``v``).
    """
    return parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


def spectral_norm(module: Any, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Any:
    """Spectral normalisation of ``module.<name>`` as ``torch.nn.utils.parametrizations.spectral_norm``.

    Args:
      module: a ``jax_impl.nn`` layer holding ``<name>``.
      name: the parameter's (or buffer's) name.
      n_power_iterations: power-method steps per training-mode access (positive).
      eps: the normalisations' ``eps``.
      dim: the matrix rows' dimension; ``None`` is 1 for ``ConvTranspose{1,2,3}d`` and 0 otherwise.

    Returns:
      ``module`` with ``parametrizations.<name>.original`` and the ``_u``/``_v`` buffers of
      ``parametrizations.<name>.0``.

    Raises:
      ValueError: no parameter or buffer ``name``, or ``n_power_iterations`` not positive.
      IndexError: ``dim`` out of range.
    """
    weight = getattr(module, name, None)
    if isinstance(weight, nnx.Variable):
        weight = weight[...]
    elif not parametrize.is_parametrized(module, name):  # a parametrized tensor is computed: its value
        raise ValueError(f"Module '{type(module).__name__}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = default_spectral_dim(module)
    return parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
