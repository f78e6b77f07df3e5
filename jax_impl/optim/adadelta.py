"""``torch.optim.Adadelta``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.optim._transforms import negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_non_negative, check_range

__all__ = ["adadelta", "AdadeltaState"]


class AdadeltaState(NamedTuple):
    count: jax.Array
    square_avg: Any
    acc_delta: Any


def adadelta(
    lr: Hyperparameter = 1.0,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    foreach: bool | None = None,
    *,
    capturable: bool = False,
    maximize: bool = False,
    differentiable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.Adadelta``, step for step as torch's single-tensor CPU path.

    .. math::
        v &\leftarrow \rho v + (1-\rho) g^2, \qquad
        \Delta = \frac{\sqrt{u + \epsilon}}{\sqrt{v + \epsilon}}\, g \\
        u &\leftarrow \rho u + (1-\rho) \Delta^2, \qquad p \leftarrow p - \gamma \Delta

    The step always descends (``optax.adadelta`` with its default
    ``learning_rate=None`` ascends).

    ``foreach=True`` (torch's multi-tensor path) is the same arithmetic on CPU:
    torch's ``_foreach_*`` kernels run the single-tensor kernels one tensor at
    a time, in this order, with the same host scalars, so every ``foreach``
    gives this result.
    """
    check_non_negative(lr, "Invalid learning rate: {}")
    check_range(rho, 0.0, 1.0, "Invalid rho value: {}")
    check_non_negative(eps, "Invalid epsilon value: {}")
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")
    check_torch_only_flags(capturable=capturable, differentiable=differentiable)

    def host_scalars(step, h, sstate):
        return {"neg_lr": -h["lr"], "rho": h["rho"], "one_minus_rho": 1 - h["rho"], "eps": h["eps"], "weight_decay": h["weight_decay"]}, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p)

    def update_leaf(ops, c, step, g, p, square_avg, acc_delta):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        square_avg = ops.addcmul(ops.mul(square_avg, c["rho"]), g, g, value=c["one_minus_rho"])
        std = ops.sqrt(square_avg + c["eps"])
        delta = ops.mul(ops.sqrt(acc_delta + c["eps"]) / std, g)
        acc_delta = ops.addcmul(ops.mul(acc_delta, c["rho"]), delta, delta, value=c["one_minus_rho"])
        return ops.add(p, delta, alpha=c["neg_lr"]), square_avg, acc_delta

    return torch_optimizer(
        state_cls=AdadeltaState,
        hyper={"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("square_avg", "acc_delta"),
        step_dependent=False,
        elementwise=True,
    )
