"""``torch.optim.NAdam``: Adam with Nesterov momentum and torch's mu_t momentum-decay schedule."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.kernels import lerp_branch_of_one_minus
from jax_impl.optim._transforms import adam_family_scalars, adam_moments, check_adam_family, negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_
from jax_impl.optim._validation import check_non_negative

__all__ = ["nadam", "NAdamState"]


class NAdamState(NamedTuple):
    count: jax.Array
    exp_avg: Any
    exp_avg_sq: Any
    mu_product: jax.Array


def nadam(
    lr: Hyperparameter = 2e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum_decay: float = 4e-3,
    decoupled_weight_decay: bool = False,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.NAdam``, step for step as torch's single-tensor or (``foreach=True``) multi-tensor CPU path.

    .. math::
        \mu_t &= \beta_1 (1 - \tfrac12\, 0.96^{t\psi}), \qquad
        \Pi_t = \Pi_{t-1}\mu_t \text{ (a float32 tensor in torch)} \\
        m &\leftarrow \operatorname{lerp}(m, g, 1-\beta_1), \qquad v \leftarrow \beta_2 v + (1-\beta_2) g^2 \\
        d &= \sqrt{v / (1-\beta_2^t)} + \epsilon \\
        p &\leftarrow p - \gamma\frac{1-\mu_t}{1-\Pi_t}\frac{g}{d} - \gamma\frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\frac{m}{d}

    This is torch's algorithm, not ``optax.nadam`` (which has no ``mu_t``
    schedule). ``mu_product`` is rounded to float32 every step, as torch
    keeps it in a float32 tensor.

    ``foreach=True`` follows torch's multi-tensor path, which takes the square
    root before the bias correction: ``d = √v / √(1-β₂ᵗ) + ε`` (an IEEE
    division by the float64 host scalar ``√(1-β₂ᵗ)``, rounded to the dtype)
    instead of ``√(v / (1-β₂ᵗ)) + ε``. Everything else (moments, the float32
    ``mu_product``, both step sizes) is the single-tensor arithmetic.

    Args:
      momentum_decay: ψ.
      decoupled_weight_decay: NAdamW-style ``p ← p(1 - γλ)``.
      foreach: torch's multi-tensor path (``True``) or the single-tensor one
        (``None``, torch's CPU default, or ``False``).
    """
    beta1, beta2 = betas
    small_weight = lerp_branch_of_one_minus(beta1)
    check_adam_family(lr, eps, betas, weight_decay)
    check_non_negative(momentum_decay, "Invalid momentum_decay value: {}")
    check_torch_only_flags(capturable=capturable, differentiable=differentiable)
    multi_tensor = bool(foreach)

    def host_scalars(step, h, sstate):
        lr_, b1, b2, psi = h["lr"], h["beta1"], h["beta2"], h["momentum_decay"]
        t = float(step)
        bias_correction2 = 1 - b2**t
        mu = b1 * (1.0 - 0.5 * (0.96 ** (t * psi)))
        mu_next = b1 * (1.0 - 0.5 * (0.96 ** ((t + 1) * psi)))
        mu_product = np.float32(sstate["mu_product"] * np.float32(mu))  # float32 tensor *= float
        mu_product_next = float(mu_product) * mu_next
        return {
            **adam_family_scalars(h),
            "bias_correction2": bias_correction2,
            "bias_correction2_sqrt": bias_correction2**0.5,
            "grad_coef": -lr_ * (1.0 - mu) / (1.0 - float(mu_product)),
            "exp_avg_coef": (-lr_ * mu_next) / (1.0 - mu_product_next),
        }, {"mu_product": mu_product}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p)

    def update_leaf(ops, c, step, g, p, exp_avg, exp_avg_sq):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay, decoupled_weight_decay)
        exp_avg, exp_avg_sq = adam_moments(ops, c, g, exp_avg, exp_avg_sq, small_weight)
        if multi_tensor:  # torch's _foreach_sqrt, then _foreach_div_ by the host list of sqrt(1 - beta2**t)
            denom = ops.div_scalar(ops.sqrt(exp_avg_sq), c["bias_correction2_sqrt"]) + c["eps"]
        else:
            denom = ops.sqrt(ops.div_scalar(exp_avg_sq, c["bias_correction2"])) + c["eps"]
        p = ops.addcdiv(p, g, denom, value=c["grad_coef"])
        p = ops.addcdiv(p, exp_avg, denom, value=c["exp_avg_coef"])
        return p, exp_avg, exp_avg_sq

    return torch_optimizer(
        state_cls=NAdamState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay, "momentum_decay": momentum_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_avg_sq"),
        scalar_state={"mu_product": 1.0},
        converges=True,  # monotone; constant once mu_product underflows to 0 and 0.96**(t*psi) < 2**-54
        elementwise=True,
    )
