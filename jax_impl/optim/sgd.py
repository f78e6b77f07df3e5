"""``torch.optim.SGD``: stochastic gradient descent with momentum, dampening and Nesterov."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.optim._transforms import negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_not_negative

__all__ = ["sgd", "SGDState"]


class SGDState(NamedTuple):
    """``momentum_buffer`` holds ``None`` at every leaf when ``momentum == 0`` (torch keeps no state)."""

    count: jax.Array
    momentum_buffer: Any


def sgd(
    lr: Hyperparameter = 1e-3,
    momentum: Hyperparameter = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    differentiable: bool = False,
    fused: bool | None = None,
) -> TorchTransformation:
    r"""``torch.optim.SGD``, step for step as torch's single-tensor CPU path.

    .. math::
        g &\leftarrow -g \text{ if maximize};\quad g \leftarrow g + \lambda\,p \text{ if } \lambda \ne 0 \\
        b &\leftarrow g \text{ (first step)},\quad b \leftarrow \mu b + (1-\tau) g \text{ (later)} \\
        g &\leftarrow g + \mu b \text{ if nesterov, else } b \\
        p &\leftarrow p - \gamma\, g

    Roundings as torch's kernels: ``g + λp``, ``(1-τ)g + round(μb)``, ``g + μb``
    and ``p - γg`` are each one FMA; the first momentum buffer is a copy of
    ``g`` (no dampening).

    Args:
      lr: learning rate γ (float or schedule). torch's default 1e-3.
      momentum: μ (float or schedule, e.g. driven by OneCycleLR).
      dampening: τ.
      weight_decay: λ, coupled L2 added to the gradient.
      nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).
      maximize: ascend instead of descend.
      foreach: ``True`` is torch's multi-tensor path, the same arithmetic on
        CPU (the same kernels one tensor at a time, in this order): every
        ``foreach`` gives this result.
      fused: ``True`` is torch's fused CPU kernel (:func:`jax_impl.optim.fused.fused_sgd`).
      differentiable: torch execution-path flag; only the
        default (``False``) is reproduced.
    """
    # torch's SGD checks `x < 0.0` (NaN passes), unlike the other optimizers.
    check_not_negative(lr, "Invalid learning rate: {}")
    check_not_negative(momentum, "Invalid momentum value: {}")
    check_not_negative(weight_decay, "Invalid weight_decay value: {}")
    if nesterov and (not callable(momentum) and momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    if fused:
        from jax_impl.optim.fused import fused_sgd  # fused imports SGDState from here

        return fused_sgd(lr, momentum, dampening, weight_decay, nesterov, maximize=maximize, foreach=foreach,
                         differentiable=differentiable)
    check_torch_only_flags(differentiable=differentiable, fused=fused)
    use_momentum = callable(momentum) or momentum != 0

    def host_scalars(step, h, sstate):
        return {"neg_lr": -h["lr"], "momentum": h["momentum"], "one_minus_dampening": 1 - h["dampening"], "weight_decay": h["weight_decay"]}, {}

    def init_leaf(p):
        return (_buffers.zeros_like(p) if use_momentum else None,)  # None: no buffer, no pytree leaf

    def update_leaf(ops, c, step, g, p, buf):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        if use_momentum:
            later = ops.add(ops.mul(buf, c["momentum"]), g, alpha=c["one_minus_dampening"])
            buf = jnp.where(step == 1, g, later)  # torch clones g into the first buffer
            g = ops.add(g, buf, alpha=c["momentum"]) if nesterov else buf
        return ops.add(p, g, alpha=c["neg_lr"]), buf

    return torch_optimizer(
        state_cls=SGDState,
        hyper={"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("momentum_buffer",),
        step_dependent=False,
        elementwise=True,
    )
