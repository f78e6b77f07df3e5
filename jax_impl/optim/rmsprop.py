"""``torch.optim.RMSprop``: eps outside the square root, alpha 0.99 (optax differs in both)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.kernels import lerp_branch_of_one_minus
from jax_impl.optim._transforms import negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_non_negative

__all__ = ["rmsprop", "RMSpropState"]


class RMSpropState(NamedTuple):
    """torch's per-parameter state; ``grad_avg`` (not ``centered``) and ``momentum_buffer``
    (``momentum == 0``) hold ``None`` at every leaf when torch keeps no such buffer."""

    count: jax.Array
    square_avg: Any
    grad_avg: Any
    momentum_buffer: Any


def rmsprop(
    lr: Hyperparameter = 1e-2,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: Hyperparameter = 0.0,
    centered: bool = False,
    capturable: bool = False,
    foreach: bool | None = None,
    maximize: bool = False,
    differentiable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.RMSprop``, step for step as torch's single-tensor CPU path.

    .. math::
        v &\leftarrow \alpha v + (1-\alpha) g^2, \qquad
        \bar g \leftarrow \operatorname{lerp}(\bar g, g, 1-\alpha) \text{ if centered} \\
        a &= \sqrt{v - \bar g^2 \text{ (centered)}} + \epsilon \\
        b &\leftarrow \mu b + g / a,\ p \leftarrow p - \gamma b \quad\text{if } \mu > 0,
        \text{ else } p \leftarrow p - \gamma g / a

    ``eps`` is added *after* the square root and ``alpha`` defaults to 0.99,
    both unlike ``optax.rmsprop``; the momentum buffer holds unscaled steps, so
    a learning-rate schedule acts on it as in torch.

    ``foreach=True`` (torch's multi-tensor path) is the same arithmetic on CPU:
    torch's ``_foreach_*`` kernels run the single-tensor kernels one tensor at
    a time, in this order, with the same host scalars, so every ``foreach``
    gives this result.
    """
    check_non_negative(lr, "Invalid learning rate: {}")
    check_non_negative(eps, "Invalid epsilon value: {}")
    check_non_negative(momentum, "Invalid momentum value: {}")
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")
    check_non_negative(alpha, "Invalid alpha value: {}")
    small_weight = lerp_branch_of_one_minus(alpha)
    check_torch_only_flags(capturable=capturable, differentiable=differentiable)
    use_momentum = callable(momentum) or momentum > 0

    def host_scalars(step, h, sstate):
        return {
            "neg_lr": -h["lr"],
            "alpha": h["alpha"],
            "one_minus_alpha": 1 - h["alpha"],
            "eps": h["eps"],
            "weight_decay": h["weight_decay"],
            "momentum": h["momentum"],
        }, {}

    def init_leaf(p):
        def maybe(flag):  # a fresh buffer each (donation rejects one array used twice); None: no buffer
            return _buffers.zeros_like(p) if flag else None

        return _buffers.zeros_like(p), maybe(centered), maybe(use_momentum)

    def update_leaf(ops, c, step, g, p, square_avg, grad_avg, buf):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        square_avg = ops.addcmul(ops.mul(square_avg, c["alpha"]), g, g, value=c["one_minus_alpha"])
        if centered:
            grad_avg = ops.lerp(grad_avg, g, c["one_minus_alpha"], small_weight)
            avg = ops.sqrt(ops.addcmul(square_avg, grad_avg, grad_avg, value=-1.0))
        else:
            avg = ops.sqrt(square_avg)
        avg = avg + c["eps"]
        if use_momentum:
            buf = ops.addcdiv(ops.mul(buf, c["momentum"]), g, avg)
            return ops.add(p, buf, alpha=c["neg_lr"]), square_avg, grad_avg, buf
        return ops.addcdiv(p, g, avg, value=c["neg_lr"]), square_avg, grad_avg, buf

    return torch_optimizer(
        state_cls=RMSpropState,
        hyper={"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay, "momentum": momentum},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("square_avg", "grad_avg", "momentum_buffer"),
        step_dependent=False,
        elementwise=True,
    )
