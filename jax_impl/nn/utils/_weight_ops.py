"""The tensor arithmetic of torch's weight and spectral normalisation, as pure functions.

Shared by the hook forms (:mod:`jax_impl.nn.utils.weight_norm`, :mod:`jax_impl.nn.utils.spectral_norm`) and the
parametrization forms (:mod:`jax_impl.nn.utils.parametrizations`), which compute the same weights.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_impl.nn._functional_normalization import normalize

__all__ = ["default_spectral_dim", "norm_except_dim", "power_iteration", "reshape_weight_to_matrix", "sigma",
           "weight_from_norm"]


def norm_except_dim(v, pow: float = 2, dim: int = 0):
    """``torch.norm_except_dim(v, pow, dim)``: the ``pow``-norm of each slice of ``v`` along ``dim``.

    The result keeps ``v``'s rank with size 1 everywhere but ``dim`` (``(v.shape[0], 1, ..., 1)`` for
    ``dim=0``); ``dim=-1`` is the norm of all of ``v`` as a 0-d array, as torch's.
    """
    v = jnp.asarray(v)
    if dim == -1:
        return jnp.linalg.norm(v.reshape(-1), ord=pow)
    if not -v.ndim <= dim < v.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-v.ndim}, {v.ndim - 1}], "
                         f"but got {dim})")
    dim %= v.ndim
    axes = tuple(d for d in range(v.ndim) if d != dim)
    if pow == 2:
        return jnp.sqrt(jnp.sum(v * v, axis=axes, keepdims=True))
    return jnp.sum(jnp.abs(v) ** pow, axis=axes, keepdims=True) ** (1.0 / pow)


def weight_from_norm(v, g, dim: int = 0):
    """``torch._weight_norm(v, g, dim)``: ``v * (g / norm_except_dim(v, 2, dim))``.

    torch's CPU kernel (``_weight_norm_interface`` for ``dim`` first or last, its composite otherwise) computes
    the same product, the norm summed in another order, so float32 results agree to rounding.
    """
    v, g = jnp.asarray(v), jnp.asarray(g)
    return v * (g / norm_except_dim(v, 2, dim))


def default_spectral_dim(module) -> int:
    """torch's ``dim=None`` for spectral norm: 1 (the output channels) for ``ConvTranspose{1,2,3}d``, else 0."""
    from jax_impl.nn.modules.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

    return 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0


def reshape_weight_to_matrix(weight, dim: int = 0):
    """``weight`` as a matrix with ``dim`` its rows: ``dim`` moved first, the rest flattened (torch's order)."""
    weight = jnp.asarray(weight)
    if dim != 0:
        weight = jnp.moveaxis(weight, dim, 0)
    return weight.reshape(weight.shape[0], -1)


def power_iteration(weight_mat, u, v, n_power_iterations: int, eps: float, v_first: bool = True):
    """``n_power_iterations`` steps of the power method on ``weight_mat``, no gradient through them.

    ``v_first`` is ``torch.nn.utils.spectral_norm``'s step, ``v = normalize(W^T u)`` then
    ``u = normalize(W v)``; otherwise ``u`` first, as ``torch.nn.utils.parametrizations.spectral_norm``.
    Returns the new ``(u, v)``.
    """
    weight_mat = jax.lax.stop_gradient(weight_mat)
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    for _ in range(n_power_iterations):
        if v_first:
            v = normalize(weight_mat.T @ u, dim=0, eps=eps)
            u = normalize(weight_mat @ v, dim=0, eps=eps)
        else:
            u = normalize(weight_mat @ v, dim=0, eps=eps)
            v = normalize(jnp.conj(weight_mat.T) @ u, dim=0, eps=eps)
    return u, v


def sigma(weight_mat, u, v):
    """The spectral norm estimate ``u . (W v)`` (torch's ``dot``/``vdot``), differentiable in ``W`` only."""
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    return jnp.vdot(u, weight_mat @ v)
