"""``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` on pytrees of gradients, and as optax transforms.

torch clips the ``.grad`` of each parameter in place. JAX arrays are
immutable, so the functions here take a pytree of gradients (``None`` leaves
are skipped, as parameters whose ``.grad`` is ``None``) and return the clipped
pytree; :func:`clip_grad_norm_` returns ``(total_norm, clipped_grads)``.

torch's CPU order (``torch/nn/utils/clip_grad.py``; ``foreach=None`` and
``True`` take ``torch._foreach_norm``, whose CPU kernel is the per-tensor loop
that ``foreach=False`` runs, so all three agree)::

    norms = [vector_norm(g, norm_type) for g in grads]         # one norm per tensor
    total_norm = vector_norm(stack(norms), norm_type)          # the norm of the norms
    clip_coef = max_norm / (total_norm + 1e-6)                 # = reciprocal(total_norm + 1e-6) * max_norm
    g *= clamp(clip_coef, max=1.0)                             # for every gradient, also when < max_norm

The norms add in aten's order (:mod:`jax_impl.nn.utils.linalg_norm`), and the
coefficient and the products are formed exactly as torch forms them
(``float / Tensor`` is ``Tensor.reciprocal() * float``; the scalars rounded to
the gradients' dtype), so total norm and clipped gradients are torch's bit
for bit in float32 for ``norm_type`` 2, 1, 0.5, 0 and +-inf; other orders go
through ``powf`` (see that module for its one caveat).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jax_impl.nn.utils.linalg_norm import vector_norm, vector_norms

__all__ = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_", "clip_grads_with_norm_",
    "get_total_norm",
]


def _leaves(tree) -> list:
    return [g for g in jax.tree_util.tree_leaves(tree) if g is not None]


def _check_foreach(foreach) -> None:
    """torch 2.13 accepts every ``foreach`` for CPU tensors; the result is the same for all three."""
    del foreach


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None):
    """``torch.nn.utils.get_total_norm``: the ``norm_type``-norm of the per-tensor norms.

    Args:
      tensors: a pytree of arrays (``None`` leaves skipped).
      norm_type: ``p`` (``inf`` for the max norm).
      error_if_nonfinite: raise ``RuntimeError`` (torch's message) when the
        total norm is NaN or infinite. Checked only on concrete values: inside
        ``jax.jit`` the norm is a tracer and no error can be raised.
      foreach: ``None`` / ``False`` / ``True``: one result on CPU, as in torch.

    Returns:
      A 0-d array (float32 ``0.0`` when there are no tensors, as torch's ``tensor(0.0)``).
    """
    _check_foreach(foreach)
    norm_type = float(norm_type)
    leaves = _leaves(tensors)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    norms = vector_norms(leaves, norm_type)
    total = vector_norm(jnp.stack([n.astype(jnp.result_type(*norms)) for n in norms]), norm_type)
    if error_if_nonfinite and _is_concrete(total) and not bool(jnp.isfinite(total)):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(grads, max_norm: float, total_norm, foreach=None):
    """``torch.nn.utils.clip_grads_with_norm_``: scale every gradient by ``min(max_norm / (total_norm + 1e-6), 1)``.

    Args:
      grads: a pytree of gradients (``None`` leaves stay ``None``).
      max_norm: the largest total norm kept.
      total_norm: a 0-d array, e.g. from :func:`get_total_norm`.
      foreach: ``None`` / ``False`` / ``True``: one result on CPU, as in torch.

    Returns:
      The scaled pytree (JAX arrays are immutable; torch scales ``.grad`` in place).
    """
    _check_foreach(foreach)
    max_norm = float(max_norm)
    total = jnp.asarray(total_norm)
    eps = jnp.asarray(1e-6, total.dtype)
    # torch: `max_norm / (total_norm + 1e-6)` is Tensor.__rtruediv__, i.e. reciprocal() * max_norm.
    coef = jnp.minimum((1 / (total + eps)) * jnp.asarray(max_norm, total.dtype), jnp.asarray(1.0, total.dtype))
    return jax.tree_util.tree_map(lambda g: None if g is None else g * coef.astype(g.dtype), grads,
                                  is_leaf=lambda g: g is None)


def clip_grad_norm_(grads, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None):
    """``torch.nn.utils.clip_grad_norm_`` on a pytree of gradients.

    Args:
      grads: a pytree of gradients (``None`` leaves are skipped and stay ``None``).
      max_norm: the largest total norm kept.
      norm_type: ``p`` of the norm (``inf`` for the max norm).
      error_if_nonfinite: raise ``RuntimeError`` on a NaN/inf total norm (concrete values only).
      foreach: ``None`` / ``False`` / ``True``: one result on CPU, as in torch.

    Returns:
      ``(total_norm, clipped_grads)``: torch returns the total norm and scales
      ``.grad`` in place; JAX arrays are immutable, so the scaled gradients are
      returned too. Every gradient is multiplied by the clamped coefficient,
      also when it is 1 (torch does the same multiplication).
    """
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    if not _leaves(grads):
        return total, grads
    return total, clip_grads_with_norm_(grads, max_norm, total, foreach)


def clip_grad_value_(grads, clip_value: float, foreach=None):
    """``torch.nn.utils.clip_grad_value_``: clamp every gradient element to ``[-clip_value, clip_value]``.

    Returns the clamped pytree (torch clamps in place and returns ``None``); NaN stays NaN.
    """
    _check_foreach(foreach)
    clip_value = float(clip_value)
    return jax.tree_util.tree_map(
        lambda g: None if g is None else jnp.clip(g, -clip_value, clip_value), grads, is_leaf=lambda g: g is None)


def clip_grad_norm(max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
                   ) -> optax.GradientTransformation:
    """:func:`clip_grad_norm_` as an optax transform, for ``optax.chain(clip_grad_norm(1.0), tx)``.

    ``update(grads, state, params=None)`` returns the clipped gradients; the
    state is ``optax.EmptyState()``.
    """

    def update(updates, state, params=None):
        del params
        return clip_grad_norm_(updates, max_norm, norm_type, error_if_nonfinite)[1], state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def clip_grad_value(clip_value: float) -> optax.GradientTransformation:
    """:func:`clip_grad_value_` as an optax transform (state ``optax.EmptyState()``)."""

    def update(updates, state, params=None):
        del params
        return clip_grad_value_(updates, clip_value), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
