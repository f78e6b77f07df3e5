"""``torch.optim.RAdam``: rectified Adam."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.kernels import lerp_branch_of_one_minus
from jax_impl.optim._transforms import adam_family_scalars, adam_moments, check_adam_family, negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_

__all__ = ["radam", "RAdamState"]


class RAdamState(NamedTuple):
    count: jax.Array
    exp_avg: Any
    exp_avg_sq: Any


def radam(
    lr: Hyperparameter = 1e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.RAdam``, step for step as torch's single-tensor or (``foreach=True``) multi-tensor CPU path.

    .. math::
        \hat m &= m / (1-\beta_1^t), \qquad
        \rho_\infty = \tfrac{2}{1-\beta_2} - 1, \qquad
        \rho_t = \rho_\infty - \frac{2t\beta_2^t}{1-\beta_2^t} \\
        p &\leftarrow p - \hat m\,\gamma\, \frac{\sqrt{1-\beta_2^t}}{\sqrt v + \epsilon}\, r_t
        \ \text{ if } \rho_t > 5, \quad \text{else } p \leftarrow p - \hat m\,\gamma \\
        r_t &= \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}

    torch's product order and its ``scalar / tensor`` (``reciprocal(t) *
    scalar``, two roundings) are reproduced; the rectification test is torch's
    strict ``rho_t > 5`` (optax uses ``>=``).

    ``foreach=True`` follows torch's multi-tensor path, which folds both
    branches into one per-element factor built from two float64 host scalars
    per step, ``s_r = -\sqrt{1-\beta_2^t}\,(\gamma r_t / (1-\beta_1^t))`` and
    ``s_u = -\gamma u_t / (1-\beta_1^t)`` (``r_t = 0, u_t = 1`` unrectified,
    ``u_t = 0`` rectified, so the unused one is ``-0.0``):

    .. math::
        b = \frac{1}{(\sqrt v + \epsilon) / s_r} + s_u, \qquad p \leftarrow p + m\, b

    five roundings (``+ε``, the IEEE division, the reciprocal, ``+ s_u``, and
    the fused ``p + m b``); unrectified, ``(√v + ε) / -0.0 = -∞`` and its
    reciprocal ``-0.0`` leave ``b = s_u``. The moments and weight decay are
    the single-tensor arithmetic.
    """
    beta1, beta2 = betas
    small_weight = lerp_branch_of_one_minus(beta1)
    check_adam_family(lr, eps, betas, weight_decay)
    check_torch_only_flags(capturable=capturable, differentiable=differentiable)
    multi_tensor = bool(foreach)

    def host_scalars(step, h, sstate):
        lr_, b1, b2 = h["lr"], h["beta1"], h["beta2"]
        t = float(step)
        bias_correction1 = 1 - b1**t
        bias_correction2 = 1 - b2**t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2**t) / bias_correction2
        rectified = rho_t > 5.0
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5 if rectified else 0.0
        if multi_tensor:  # torch's _multi_tensor_radam scalar lists, in its expression order
            unrectified = 0 if rect > 0 else 1.0
            return {
                **adam_family_scalars(h),
                "rect_step": ((bias_correction2**0.5) * (lr_ * rect / bias_correction1)) * -1,
                "unrect_step": (lr_ * unrectified / bias_correction1) * -1,
            }, {}
        return {
            **adam_family_scalars(h),
            "bias_correction1": bias_correction1,
            "bias_correction2_sqrt": bias_correction2**0.5,
            "lr": lr_,
            "rect": rect,
            "rectified": 1.0 if rectified else 0.0,
        }, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p)

    def update_leaf(ops, c, step, g, p, exp_avg, exp_avg_sq):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay, decoupled_weight_decay)
        exp_avg, exp_avg_sq = adam_moments(ops, c, g, exp_avg, exp_avg_sq, small_weight)
        if multi_tensor:
            buffer = ops.sqrt(exp_avg_sq) + c["eps"]
            # rect_step is -0.0 unrectified: div_scalar's reciprocal product is only exact for a finite,
            # nonzero divisor, and buffer / -0.0 is -inf (NaN for a zero buffer) as in torch.
            rect_step = c["rect_step"]
            nonzero = rect_step != 0
            buffer = jnp.where(nonzero, ops.div_scalar(buffer, jnp.where(nonzero, rect_step, 1)), buffer / rect_step)
            buffer = ops.reciprocal(buffer) + c["unrect_step"]
            return ops.addcmul(p, exp_avg, buffer), exp_avg, exp_avg_sq
        scaled = ops.mul(ops.div_scalar(exp_avg, c["bias_correction1"]), c["lr"])  # (m / bc1) * lr
        adaptive_lr = ops.mul(ops.reciprocal(ops.sqrt(exp_avg_sq) + c["eps"]), c["bias_correction2_sqrt"])
        rectified_step = ops.mul(ops.mul(scaled, adaptive_lr), c["rect"])
        return p - jnp.where(c["rectified"] > 0, rectified_step, scaled), exp_avg, exp_avg_sq

    return torch_optimizer(
        state_cls=RAdamState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_avg_sq"),
        converges=True,  # bias corrections 1 - beta**t: monotone, constant once beta**t < 2**-54
        elementwise=True,
    )
