"""Kernel fragments several torch optimizers share, in torch's operation order.

Each is one step of torch's single-tensor loop, written with
:class:`~jax_impl.kernels.TorchOps`; the optimizers are short sequences of
them (the optax habit: small named transforms, composed).
"""

from __future__ import annotations

from typing import Any

import jax

from jax_impl.kernels import TorchOps
from jax_impl.optim._validation import check_beta, check_non_negative

__all__ = [
    "check_adam_family",
    "adam_family_scalars",
    "negate_if",
    "weight_decay",
    "adam_moments",
]


def check_adam_family(lr: Any, eps: float, betas: tuple[Any, Any], weight_decay: float) -> None:
    """torch's checks, in torch's order, for Adam/AdamW/Adamax/NAdam/RAdam."""
    check_non_negative(lr, "Invalid learning rate: {}")
    check_non_negative(eps, "Invalid epsilon value: {}")
    check_beta(betas[0], 0)
    check_beta(betas[1], 1)
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")


def adam_family_scalars(h: dict[str, float]) -> dict[str, float]:
    """The float64 host scalars the Adam family's shared fragments read.

    ``decay = 1 - lr * weight_decay`` (decoupled decay), ``1 - beta1`` (the
    lerp weight), ``beta2`` and ``1 - beta2`` (the second moment), ``eps``.
    """
    return {
        "decay": 1 - h["lr"] * h["weight_decay"],
        "weight_decay": h["weight_decay"],
        "one_minus_beta1": 1 - h["beta1"],
        "beta2": h["beta2"],
        "one_minus_beta2": 1 - h["beta2"],
        "eps": h["eps"],
    }


def negate_if(maximize: bool, g: jax.Array) -> jax.Array:
    """``grad = -grad if maximize``."""
    return -g if maximize else g


def weight_decay(
    ops: TorchOps, c: dict[str, jax.Array], g: jax.Array, p: jax.Array, amount: float, decoupled: bool = False
) -> tuple[jax.Array, jax.Array]:
    """torch's weight decay: coupled ``g.add(p, alpha=wd)`` or decoupled ``p.mul_(1 - lr * wd)``.

    Nothing happens when ``amount == 0`` (torch skips the kernel, which
    matters for ``inf``/``nan`` parameters). Returns ``(g, p)``.
    """
    if amount == 0:
        return g, p
    if decoupled:
        return g, ops.mul(p, c["decay"])
    return ops.add(g, p, alpha=c["weight_decay"]), p


def adam_moments(
    ops: TorchOps, c: dict[str, jax.Array], g: jax.Array, exp_avg: jax.Array, exp_avg_sq: jax.Array,
    small_weight: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``exp_avg.lerp_(g, 1 - beta1)``; ``exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)``.

    ``small_weight``: ``lerp_branch(1 - beta1)`` when beta1 is a constant (see ``TorchOps.lerp``).
    """
    exp_avg = ops.lerp(exp_avg, g, c["one_minus_beta1"], small_weight)
    exp_avg_sq = ops.addcmul(ops.mul(exp_avg_sq, c["beta2"]), g, g, value=c["one_minus_beta2"])
    return exp_avg, exp_avg_sq
