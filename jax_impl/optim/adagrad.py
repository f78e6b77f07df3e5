"""``torch.optim.Adagrad``: accumulator starts at 0, eps 1e-10 outside the square root."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.optim._transforms import negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_non_negative

__all__ = ["adagrad", "AdagradState"]


class AdagradState(NamedTuple):
    count: jax.Array
    sum: Any


def adagrad(
    lr: Hyperparameter = 1e-2,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    initial_accumulator_value: float = 0.0,
    eps: float = 1e-10,
    foreach: bool | None = None,
    *,
    maximize: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
) -> TorchTransformation:
    r"""``torch.optim.Adagrad``, step for step as torch's single-tensor CPU path (dense gradients).

    .. math::
        \tilde\gamma = \frac{\gamma}{1 + (t-1)\,\eta}, \qquad
        s \leftarrow s + g^2, \qquad
        p \leftarrow p - \tilde\gamma\, \frac{g}{\sqrt{s} + \epsilon}

    ``γ̃`` is a float64 host scalar. Unlike ``optax.adagrad`` the accumulator
    starts at ``initial_accumulator_value`` (0) and ``eps`` (1e-10) is outside
    the square root. Sparse gradients are not supported (JAX has none here).

    ``foreach=True`` (torch's multi-tensor path) is the same arithmetic on CPU:
    it rounds ``-γ̃ g`` into its own tensor and adds ``that / std``, which is
    what ``addcdiv_(g, std, value=-γ̃)`` computes, so every ``foreach`` gives
    this result.
    """
    check_non_negative(lr, "Invalid learning rate: {}")
    check_non_negative(lr_decay, "Invalid lr_decay value: {}")
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")
    check_non_negative(initial_accumulator_value, "Invalid initial_accumulator_value value: {}")
    check_non_negative(eps, "Invalid epsilon value: {}")
    if fused:
        from jax_impl.optim.fused import fused_adagrad  # fused imports AdagradState from here

        return fused_adagrad(lr, lr_decay, weight_decay, initial_accumulator_value, eps, foreach,
                             maximize=maximize, differentiable=differentiable)
    check_torch_only_flags(differentiable=differentiable, fused=fused)

    def host_scalars(step, h, sstate):
        clr = h["lr"] / (1 + (float(step) - 1) * h["lr_decay"])
        return {"neg_clr": -clr, "eps": h["eps"], "weight_decay": h["weight_decay"]}, {}

    def init_leaf(p):
        return (_buffers.full_like(p, initial_accumulator_value),)

    def update_leaf(ops, c, step, g, p, state_sum):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        state_sum = ops.addcmul(state_sum, g, g)
        std = ops.sqrt(state_sum) + c["eps"]
        return ops.addcdiv(p, g, std, value=c["neg_clr"]), state_sum

    return torch_optimizer(
        state_cls=AdagradState,
        hyper={"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("sum",),
        step_dependent=lr_decay != 0,
        elementwise=True,
    )
