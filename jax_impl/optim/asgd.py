"""``torch.optim.ASGD``: averaged stochastic gradient descent."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.optim import _buffers
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
    r"""``torch.optim.ASGD``, step for step as torch's single-tensor or (``foreach=True``) multi-tensor CPU path.

    .. math::
        p &\leftarrow p (1 - \lambda\eta_{t-1}) - \eta_{t-1} g, \qquad
        a \leftarrow a + \mu_{t-1}(p - a) \ (\text{or } a \leftarrow p \text{ if } \mu_{t-1} = 1) \\
        \eta_t &= \frac{\gamma}{(1 + \lambda\gamma t)^\alpha}, \qquad \mu_t = \frac{1}{\max(1, t - t_0)}

    ``eta`` and ``mu`` are float32 scalars in the state (torch keeps them in
    float32 tensors and reads them back with ``.item()``); ``ax`` is the
    averaged parameter.

    ``foreach=True`` follows torch's multi-tensor path, another arithmetic:

    .. math::
        q &= (g + \lambda_{wd}\, p) + \lambda p \ (\text{two FMAs; } g + \lambda p \text{ without weight decay}),
        \qquad p \leftarrow p - q\,\eta_{t-1} \ (\text{one FMA}) \\
        a &\leftarrow a + (p - a)\,\mu_{t-1} \ (\text{one FMA, also when } \mu_{t-1} = 1) \\
        \eta_t &= \operatorname{fl}_{32}(\gamma) \cdot \frac{1}{\operatorname{fl}_{32}(1 +
                 \operatorname{fl}_{32}(\lambda\gamma) \cdot t)^\alpha}

    where every operation of ``η_t`` rounds to float32 (torch computes it on
    the float32 step tensor: ``lr / x`` is ``x.reciprocal() * lr``, and the
    power of a one-element float32 tensor is ``std::pow`` in float64 rounded
    to float32, except ATen's exact special cases ``α ∈ {0, 1, 2, 3, -1, -2,
    -0.5}``). ``α = 0.5`` takes torch's CPU sqrt of one element (MKL's, not
    correctly rounded) and is not supported with ``foreach=True``. ``μ_t`` is
    the single-tensor float64 expression rounded to float32.
    """
    check_non_negative(lr, "Invalid learning rate: {}")
    check_non_negative(weight_decay, "Invalid weight_decay value: {}")
    check_torch_only_flags(differentiable=differentiable, capturable=capturable)
    multi_tensor = bool(foreach)
    if multi_tensor and alpha == 0.5:
        raise NotImplementedError(
            "ASGD(foreach=True, alpha=0.5): torch computes eta with its CPU sqrt of a one-element float32 "
            "tensor (MKL's, not correctly rounded), which this host maths does not reproduce")
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
        if multi_tensor:
            # torch: lr / ((1 + lambd * lr * step_t) ** alpha) on the float32 step tensor.
            x = np.float32(np.float32(lambd_ * lr_) * np.float32(t))
            x = np.float32(x + np.float32(1.0))
            x = _float32_pow(x, h["alpha"])
            new_eta = np.float32((np.float32(1.0) / x) * np.float32(lr_))
            return {
                "eta": eta, "mu": mu, "lambd": lambd_, "weight_decay": h["weight_decay"],
            }, {"eta": new_eta, "mu": new_mu}
        return {
            "decay": 1 - lambd_ * eta,
            "neg_eta": -eta,
            "mu": mu,
            "mu_is_one": 1.0 if mu == 1 else 0.0,
            "weight_decay": h["weight_decay"],
        }, {"eta": new_eta, "mu": new_mu}

    def init_leaf(p):
        return (_buffers.zeros_like(p),)

    def update_leaf(ops, c, step, g, p, ax):
        if multi_tensor:
            # _foreach_add(grads, params, alpha=weight_decay), _foreach_add_(.., params, alpha=lambd),
            # _foreach_addcmul_(params, q, etas, value=-1), then _foreach_addcmul_(axs, params - axs, mus).
            q, _ = weight_decay_(ops, c, negate_if(maximize, g), p, weight_decay)
            q = ops.add(q, p, alpha=c["lambd"])
            p = ops.addcmul(p, q, c["eta"], value=-1.0)
            return p, ops.addcmul(ax, p - ax, c["mu"])
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
        elementwise=True,
    )


def _float32_pow(base: np.float32, exponent: float) -> np.float32:
    """ATen's CPU ``pow(t, exponent)`` of a one-element float32 tensor ``t`` (``PowKernel.cpp``).

    Special exponents are exact float32 kernels; any other is ``std::pow`` in
    float64 (the scalar loop of ``pow_tensor_scalar_optimized_kernel``, which a
    one-element tensor takes) rounded to float32. Python's ``**`` on floats
    is the same C ``pow``.
    """
    one = np.float32(1.0)
    if exponent == 0:
        return one
    if exponent == 1:
        return base
    if exponent == -0.5:
        return np.float32(one / np.sqrt(base))  # ATen's rsqrt kernel: 1 / sqrt, IEEE for one element
    if exponent == -1:
        return np.float32(one / base)
    if exponent == 2:
        return np.float32(base * base)
    if exponent == 3:
        return np.float32(np.float32(base * base) * base)
    if exponent == -2:
        return np.float32(1.0 / float(np.float32(base * base)))  # double(1.0) / float, rounded to float32
    return np.float32(float(base) ** exponent)
