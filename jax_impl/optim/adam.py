"""``torch.optim.Adam`` and ``torch.optim.AdamW``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.kernels import lerp_branch_of_one_minus
from jax_impl.optim._transforms import adam_family_scalars, adam_moments, check_adam_family, negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_

__all__ = ["adam", "adamw", "AdamState"]


class AdamState(NamedTuple):
    """``max_exp_avg_sq`` holds ``None`` at every leaf without ``amsgrad`` (torch keeps no such buffer)."""

    count: jax.Array
    exp_avg: Any
    exp_avg_sq: Any
    max_exp_avg_sq: Any


def adam(
    lr: Hyperparameter = 1e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
    decoupled_weight_decay: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.Adam``, step for step as torch's single-tensor CPU path.

    .. math::
        g &\leftarrow g + \lambda p \quad (\text{or } p \leftarrow p(1 - \gamma\lambda) \text{ if decoupled}) \\
        m &\leftarrow \operatorname{lerp}(m, g, 1-\beta_1), \qquad
        v \leftarrow \beta_2 v + (1-\beta_2) g^2 \\
        \hat v &= \max(\hat v_{t-1}, v) \text{ if amsgrad (the raw } v\text{), else } v \\
        p &\leftarrow p - \frac{\gamma}{1-\beta_1^t}\, \frac{m}{\sqrt{\hat v}/\sqrt{1-\beta_2^t} + \epsilon}

    ``1 - β^t``, ``γ / (1 - β1^t)`` and ``sqrt(1 - β2^t)`` are float64 host
    scalars, rounded to the parameter dtype as torch's kernels round them.
    torch's CPU sqrt (MKL VML) is not correctly rounded, so float32 results
    agree to about 1 ULP per step rather than bit for bit.

    Args:
      lr: learning rate γ (float or schedule).
      betas: (β1, β2); β1 may be a schedule (OneCycleLR's momentum cycling).
      eps: ε, added after the square root.
      weight_decay: λ; coupled L2 unless ``decoupled_weight_decay``.
      amsgrad: keep the running maximum of the raw ``v``.
      maximize: ascend instead of descend.
      decoupled_weight_decay: AdamW's decay ``p ← p(1 - γλ)`` before the step.
      foreach: ``True`` is torch's multi-tensor path, the same arithmetic on
        CPU (torch's ``_foreach_*`` kernels run these kernels one tensor at a
        time, in this order, with the same host scalars): every ``foreach``
        gives this result.
      fused: ``True`` is torch's fused CPU kernel (:func:`jax_impl.optim.fused.fused_adam`).
      capturable, differentiable: torch execution-path flags;
        only the default is reproduced.
    """
    beta1, beta2 = betas
    check_adam_family(lr, eps, betas, weight_decay)
    if isinstance(beta1, jax.Array) != isinstance(beta2, jax.Array):
        # torch/optim/adam.py checks this after the range checks (a schedule counts as a float here).
        raise ValueError("betas must be either both floats or both Tensors")
    small_weight = lerp_branch_of_one_minus(beta1)
    if fused:
        from jax_impl.optim.fused import fused_adam  # fused imports AdamState from here

        return fused_adam(lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                          capturable=capturable, differentiable=differentiable,
                          decoupled_weight_decay=decoupled_weight_decay)
    check_torch_only_flags(capturable=capturable, differentiable=differentiable, fused=fused)

    def host_scalars(step, h, sstate):
        t = float(step)  # torch reads its float32 step tensor with .item()
        bias_correction1 = 1 - h["beta1"] ** t
        bias_correction2 = 1 - h["beta2"] ** t
        return {
            **adam_family_scalars(h),
            "bias_correction2_sqrt": bias_correction2**0.5,
            "neg_step_size": -(h["lr"] / bias_correction1),
        }, {}

    def init_leaf(p):
        # Distinct buffers (never one array twice: donation would reject the state); None: no buffer.
        return _buffers.zeros_like(p), _buffers.zeros_like(p), _buffers.zeros_like(p) if amsgrad else None

    def update_leaf(ops, c, step, g, p, m, v, v_max):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay, decoupled_weight_decay)
        m, v = adam_moments(ops, c, g, m, v, small_weight)
        if amsgrad:
            v_max = ops.maximum(v_max, v)
        denom = ops.div_scalar(ops.sqrt(v_max if amsgrad else v), c["bias_correction2_sqrt"]) + c["eps"]
        return ops.addcdiv(p, m, denom, value=c["neg_step_size"]), m, v, v_max

    return torch_optimizer(
        state_cls=AdamState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
        converges=True,  # bias corrections 1 - beta**t: monotone, constant once beta**t < 2**-54
        elementwise=True,
    )


def adamw(
    lr: Hyperparameter = 1e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    amsgrad: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
) -> TorchTransformation:
    """``torch.optim.AdamW``: :func:`adam` with ``decoupled_weight_decay=True`` and weight_decay 1e-2.

    ``p ← p (1 - γλ)`` (one float64 host scalar, one rounding) before Adam's step.
    """
    return adam(
        lr,
        betas,
        eps,
        weight_decay,
        amsgrad,
        foreach=foreach,
        maximize=maximize,
        capturable=capturable,
        differentiable=differentiable,
        fused=fused,
        decoupled_weight_decay=True,
    )
