"""``torch.optim.ASGD``: averaged stochastic gradient descent."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, is_host_schedule, torch_optimizer
from jax_impl.optim._transforms import negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_non_negative

__all__ = ["asgd", "ASGDState"]


class ASGDState(NamedTuple):
    count: jax.Array
    ax: Any
    eta: jax.Array
    mu: jax.Array


def asgd(
    lr: Hyperparameter = 1e-2,
    lambd: float = 1e-4,
    alpha: float = 0.75,
    t0: float = 1e6,
    weight_decay: float = 0.0,
    foreach: bool | None = None,
    maximize: bool = False,
    differentiable: bool = False,
    capturable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.ASGD``, step for step as torch's single-tensor CPU path.

    .. math::
        p &\leftarrow p (1 - \lambda\eta_{t-1}) - \eta_{t-1} g, \qquad
        a \leftarrow a + \mu_{t-1}(p - a) \ (\text{or } a \leftarrow p \text{ if } \mu_{t-1} = 1) \\
        \eta_t &= \frac{\gamma}{(1 + \lambda\gamma t)^\alpha}, \qquad \mu_t = \frac{1}{\max(1, t - t_0)}

    ``eta`` and ``mu`` are float32 scalars in the state (torch keeps them in
    float32 tensors and reads them back with ``.item()``); ``ax`` is the
    averaged parameter.
    """
    check_non_negative(lr, "Invalid learning rate: {}")
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")
    check_torch_only_flags(foreach=foreach, differentiable=differentiable, capturable=capturable)
    if callable(lr) and not is_host_schedule(lr):
        raise NotImplementedError("ASGD with a traced lr schedule: its initial eta needs lr(0) on the host")
    initial_eta = float(lr(0)) if callable(lr) else float(lr)

    def host_scalars(step, h, sstate):
        eta = float(sstate["eta"])  # torch: _get_value(eta), a float32 tensor
        mu = float(sstate["mu"])
        lr_, lambd_ = h["lr"], h["lambd"]
        t = float(step)
        new_eta = np.float32(lr_ / ((1 + lambd_ * lr_ * t) ** h["alpha"]))
        new_mu = np.float32(1 / max(1, t - h["t0"]))
        return {
            "decay": 1 - lambd_ * eta,
            "neg_eta": -eta,
            "mu": mu,
            "mu_is_one": 1.0 if mu == 1 else 0.0,
            "weight_decay": h["weight_decay"],
        }, {"eta": new_eta, "mu": new_mu}

    def init_leaf(p):
        return (jnp.zeros_like(p),)

    def update_leaf(ops, c, step, g, p, ax):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        p = ops.add(ops.mul(p, c["decay"]), g, alpha=c["neg_eta"])
        averaged = ax + ops.mul(p - ax, c["mu"])
        return p, jnp.where(c["mu_is_one"] > 0, p, averaged)

    return torch_optimizer(
        state_cls=ASGDState,
        hyper={"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("ax",),
        scalar_state={"eta": initial_eta, "mu": 1.0},
    )
