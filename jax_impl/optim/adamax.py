"""``torch.optim.Adamax``: Adam with the infinity norm."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_impl.optim import _buffers
from jax_impl.optim._base import Hyperparameter, TorchTransformation, check_torch_only_flags, torch_optimizer
from jax_impl.kernels import lerp_branch_of_one_minus
from jax_impl.optim._transforms import adam_family_scalars, check_adam_family, negate_if
from jax_impl.optim._transforms import weight_decay as weight_decay_

__all__ = ["adamax", "AdamaxState"]


class AdamaxState(NamedTuple):
    count: jax.Array
    exp_avg: Any
    exp_inf: Any


def adamax(
    lr: Hyperparameter = 2e-3,
    betas: tuple[Hyperparameter, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    foreach: bool | None = None,
    *,
    maximize: bool = False,
    differentiable: bool = False,
    capturable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.Adamax``, step for step as torch's single-tensor CPU path.

    .. math::
        m \leftarrow \operatorname{lerp}(m, g, 1-\beta_1), \qquad
        u \leftarrow \max(\beta_2 u, |g| + \epsilon), \qquad
        p \leftarrow p - \frac{\gamma}{1-\beta_1^t}\,\frac{m}{u}

    No square root: float32 results are bit-identical to torch's.

    ``foreach=True`` (torch's multi-tensor path) is the same arithmetic on CPU:
    torch's ``_foreach_*`` kernels run the single-tensor kernels one tensor at
    a time, in this order, with the same host scalars, so every ``foreach``
    gives this result.
    """
    beta1, beta2 = betas
    check_adam_family(lr, eps, betas, weight_decay)
    small_weight = lerp_branch_of_one_minus(beta1)
    check_torch_only_flags(differentiable=differentiable, capturable=capturable)

    def host_scalars(step, h, sstate):
        clr = h["lr"] / (1 - h["beta1"] ** float(step))
        return {**adam_family_scalars(h), "neg_clr": -clr}, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.zeros_like(p)

    def update_leaf(ops, c, step, g, p, exp_avg, exp_inf):
        g, p = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
        exp_avg = ops.lerp(exp_avg, g, c["one_minus_beta1"], small_weight)
        exp_inf = ops.maximum(ops.mul(exp_inf, c["beta2"]), jnp.abs(g) + c["eps"])
        return ops.addcdiv(p, exp_avg, exp_inf, value=c["neg_clr"]), exp_avg, exp_inf

    return torch_optimizer(
        state_cls=AdamaxState,
        hyper={"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("exp_avg", "exp_inf"),
        converges=True,  # bias corrections 1 - beta**t: monotone, constant once beta**t < 2**-54
        elementwise=True,
    )
