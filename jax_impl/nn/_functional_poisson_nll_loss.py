"""``torch.nn.functional.poisson_nll_loss``: ATen's composite (``aten/src/ATen/native/Loss.cpp``) on jax arrays.

    log_input:      loss = exp(input) - target * input
    not log_input:  loss = input - target * log(input + eps)
    full:           loss += (target * log(target) - target + 0.5 * log(2 pi target)), 0 where target <= 1

torch differentiates this composite with autograd; the backward here is that
graph op by op (``exp``: ``g * result``; ``mul``: ``g * other``; ``log``:
``g / self``; ``sub``: ``-g``; ``masked_fill``: ``g`` zeroed where masked),
each product rounded on its own as torch's kernels do.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.nn._functional_loss import legacy_get_string
from jax_impl.nn._loss_ops import reduce as apply_loss_reduction
from jax_impl.nn._loss_ops import rounded_alone, true_divide

__all__ = ["poisson_nll_loss"]

Array = jax.Array


def _scalar(value: float, dtype) -> Array:
    """A Python float as torch's CPU kernels use it on a ``dtype`` tensor: rounded to ``dtype``."""
    return jnp.asarray(np.asarray(value, np.float64).astype(dtype))


def _stirling(t: Array) -> tuple[Array, Array, Array]:
    log_t = jnp.log(t)
    two_pi_t = rounded_alone(_scalar(2 * math.pi, t.dtype) * t)
    term = rounded_alone(t * log_t) - t + rounded_alone(_scalar(0.5, t.dtype) * jnp.log(two_pi_t))
    return jnp.where(t <= 1, jnp.zeros((), t.dtype), term), log_t, two_pi_t


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _poisson_nll(x: Array, t: Array, log_input: bool, full: bool, eps: float) -> Array:
    """Elementwise loss of same-shaped ``x`` and ``t``."""
    return _poisson_fwd(x, t, log_input, full, eps)[0]


def _poisson_fwd(x, t, log_input, full, eps):
    if log_input:
        e = jnp.exp(x)
        loss = e - rounded_alone(t * x)
        saved = e
    else:
        shifted = x + _scalar(eps, x.dtype)
        log_shifted = jnp.log(shifted)
        loss = x - rounded_alone(t * log_shifted)
        saved = (shifted, log_shifted)
    if full:
        loss = loss + _stirling(t)[0]
    return loss, (x, t, saved)


def _poisson_bwd(log_input, full, eps, res, g):
    x, t, saved = res
    neg = -g  # SubBackward0 for the subtracted product
    if log_input:
        gx = rounded_alone(g * saved) + rounded_alone(neg * t)
        gt = rounded_alone(neg * x)
    else:
        shifted, log_shifted = saved
        gx = g + true_divide(rounded_alone(neg * t), shifted)
        gt = rounded_alone(neg * log_shifted)
    if full:
        _, log_t, two_pi_t = _stirling(t)
        gs = jnp.where(t <= 1, jnp.zeros((), g.dtype), g)  # masked_fill backward
        half = true_divide(rounded_alone(gs * _scalar(0.5, g.dtype)), two_pi_t)
        gt = (
            gt
            + rounded_alone(gs * log_t)
            + true_divide(rounded_alone(gs * t), t)
            - gs
            + rounded_alone(half * _scalar(2 * math.pi, g.dtype))
        )
    return gx, gt


_poisson_nll.defvjp(_poisson_fwd, _poisson_bwd)


def poisson_nll_loss(
    input: Array,
    target: Array,
    log_input: bool = True,
    full: bool = False,
    size_average: bool | None = None,
    eps: float = 1e-8,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Poisson negative log-likelihood, torch's ``poisson_nll_loss``.

    ``log_input=True``: ``exp(input) - target * input``; ``False``:
    ``input - target * log(input + eps)``. ``full`` adds the Stirling term
    ``target * log(target) - target + 0.5 * log(2 pi target)`` where
    ``target > 1`` (0 elsewhere). ``input`` and ``target`` broadcast.

    Args:
        input: rate (or log-rate when ``log_input``), any shape.
        target: counts, broadcastable with ``input``.
        log_input: whether ``input`` is a log-rate.
        full: add the Stirling approximation term.
        size_average: Deprecated.
        eps: added to ``input`` inside the log when ``log_input=False``.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, of the broadcast shape for ``'none'``, else a scalar.
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_get_string(size_average, reduce)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not a valid value for reduction")
    x, t = jnp.asarray(input), jnp.asarray(target)
    dtype = jnp.result_type(x, t)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.float32
    x, t = jnp.broadcast_arrays(x.astype(dtype), t.astype(dtype))
    return apply_loss_reduction(_poisson_nll(x, t, bool(log_input), bool(full), float(eps)), reduction)
