"""``torch.nn.functional.gaussian_nll_loss`` (torch 2.13's Python implementation) on jax arrays.

    loss = 0.5 * (log(max(var, eps)) + (input - target)^2 / max(var, eps))  [+ 0.5 * log(2 pi) if full]

torch clamps a clone of ``var`` in place under ``no_grad``, so the gradient
reaches ``var`` as if the clamp were the identity: evaluated at the clamped
value, not cut where ``var < eps``. The backward here is torch's autograd
graph of that composite, op by op (``pow``, ``div``, ``log``, ``mul``,
``sub``), with broadcast gradients summed back where torch sums them: the
``log(var)`` branch sums the incoming gradient before dividing by ``var``,
the ``div`` branch divides before summing.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.nn._loss_ops import mean, rounded_alone, sum_to, true_divide

__all__ = ["gaussian_nll_loss"]

Array = jax.Array


def _scalar(value: float, dtype) -> Array:
    """A Python float as torch's CPU kernels use it on a ``dtype`` tensor: rounded to ``dtype``."""
    return jnp.asarray(np.asarray(value, np.float64).astype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _gaussian_nll(x: Array, t: Array, var: Array, eps: float, full: bool) -> Array:
    """Elementwise loss over the broadcast shape of ``x``, ``t`` and ``var``."""
    return _gaussian_fwd(x, t, var, eps, full)[0]


def _gaussian_fwd(x, t, var, eps, full):
    v = jnp.maximum(var, _scalar(eps, var.dtype))  # clamp_(min=eps), NaN kept
    d = x - t
    sq = rounded_alone(d * d)
    loss = rounded_alone(_scalar(0.5, x.dtype) * (jnp.log(v) + true_divide(sq, v)))
    if full:
        loss = loss + _scalar(0.5 * math.log(2 * math.pi), x.dtype)
    return loss, (x, t, var, v, d, sq)


def _gaussian_bwd(eps, full, res, g):
    x, t, var, v, d, sq = res
    gs = rounded_alone(g * _scalar(0.5, g.dtype))  # MulBackward0 of 0.5 * (...)
    g_var_log = true_divide(sum_to(gs, v.shape), v)  # AddBackward0 sums to log(v)'s shape, LogBackward0 divides
    g_var_div = sum_to(rounded_alone(-gs * true_divide(true_divide(sq, v), v)), v.shape)  # div_tensor_other_backward
    g_sq = true_divide(gs, v)  # div_tensor_self_backward
    g_d = rounded_alone(g_sq * (_scalar(2.0, d.dtype) * d))  # pow_backward: grad * (2 * d^1)
    return sum_to(g_d, x.shape), sum_to(-g_d, t.shape), g_var_log + g_var_div


_gaussian_nll.defvjp(_gaussian_fwd, _gaussian_bwd)


def _is_traced(value) -> bool:
    return isinstance(value, jax.core.Tracer)


def gaussian_nll_loss(
    input: Array,
    target: Array,
    var: Array | float,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Array:
    """Gaussian negative log-likelihood, torch's ``gaussian_nll_loss``.

    ``loss = 0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps))``,
    plus ``0.5 log(2 pi)`` when ``full``; ``'mean'`` averages over the
    broadcast shape, ``'sum'`` sums it.

    ``var`` is either ``input``'s shape, ``input``'s shape without its last
    axis (unsqueezed to a trailing 1, as torch does), the same rank as
    ``input`` whose mismatched sizes sum to 1 (one axis of size 1), or a
    Python float (no gradient). The clamp at ``eps`` does not change
    ``var``'s gradient path (torch clamps under ``no_grad``): the gradient is
    the unclamped formula's, evaluated at the clamped value.

    Args:
        input: expectations, any shape.
        target: samples, broadcastable with ``input``.
        var: positive variances or a float.
        full: include the constant term.
        eps: lower clamp of ``var``.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, of the broadcast shape for ``'none'``, else a scalar.

    Raises:
        ValueError: torch's ``var has negative entry/entries`` (checked only
            when ``var`` is concrete), ``var is of incorrect size`` and
            ``<reduction> is not valid``.
    """
    x = jnp.asarray(input)
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        v = _scalar(var, x.dtype) * jnp.ones_like(x)
        v = jax.lax.stop_gradient(v)
    elif isinstance(var, (bool, int)):
        # torch evaluates torch.any(var < 0) on a Python bool here.
        raise TypeError(
            "any() received an invalid combination of arguments - got (bool), but expected one of:\n"
            " * (Tensor input, *, Tensor out = None)\n"
            " * (Tensor input, tuple of ints dim = None, bool keepdim = False, *, Tensor out = None)\n"
            " * (Tensor input, int dim, bool keepdim = False, *, Tensor out = None)\n"
        )
    else:
        v = jnp.asarray(var)
        if not _is_traced(v) and bool(np.any(np.asarray(v) < 0)):
            raise ValueError("var has negative entry/entries")
    if v.shape != x.shape:
        if x.shape[:-1] == v.shape:
            v = v[..., None]
        elif x.ndim == v.ndim and sum(b for a, b in zip(x.shape, v.shape, strict=True) if a != b) == 1:
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    t = jnp.asarray(target)
    dtype = jnp.result_type(x, t, v)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.float32
    loss = _gaussian_nll(x.astype(dtype), t.astype(dtype), v.astype(dtype), float(eps), bool(full))
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    return loss
