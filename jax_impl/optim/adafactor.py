"""``torch.optim.Adafactor``: factored second moments, relative step size, update clipping."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.optim import _buffers
from jax_impl.optim._base import (
    Hyperparameter, TorchTransformation, is_host_schedule, torch_optimizer,
)
from jax_impl.cpu_reductions import divide, norm2_columns, norm2_rows, sum_rows
from jax_impl.optim._transforms import negate_if

__all__ = ["adafactor", "AdafactorState"]


class AdafactorState(NamedTuple):
    """torch's per-parameter state: ``row_var`` (``(..., m, 1)``) and ``col_var`` (``(..., 1, n)``) for
    parameters of 2 or more dimensions, ``variance`` for 0-d and 1-d ones; the others hold ``None``."""

    count: jax.Array
    row_var: Any
    col_var: Any
    variance: Any


def adafactor(
    lr: Hyperparameter = 1e-2,
    beta2_decay: float = -0.8,
    eps: tuple[float | None, float] = (None, 1e-3),
    d: float = 1.0,
    weight_decay: float = 0.0,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.Adafactor``, step for step as torch's single-tensor or (``foreach=True``) multi-tensor CPU path.

    .. math::
        \hat\beta_{2,t} &= 1 - t^{\tau}, \quad \rho_t = \min(\gamma, 1/\sqrt t), \quad
        \alpha_t = \max(\epsilon_2, \operatorname{RMS}(p_{t-1}))\,\rho_t \\
        p &\leftarrow p\,(1 - \gamma\lambda) \\
        R &\leftarrow \operatorname{lerp}(R, \operatorname{mean}_{-1} g^2, t^{\tau}), \quad
        C \leftarrow \operatorname{lerp}(C, \operatorname{mean}_{-2} g^2, t^{\tau}), \quad
        \hat V = \frac{R\,C}{\max(\operatorname{mean}_{-2} R, \epsilon_1)} \quad (\dim p \ge 2) \\
        V &\leftarrow \operatorname{lerp}(V, g^2, t^{\tau}), \quad \hat V = V \quad (\dim p < 2) \\
        U &= g \,/\, \sqrt{\max(\hat V, \epsilon_1^2)}, \quad
        p \leftarrow p - \frac{\alpha_t}{\max(1, \operatorname{RMS}(U) / d)}\, U

    As torch computes them: the row and column means are ``torch.norm(g, dim)²
    / size`` and ``R @ C`` a matmul of one-element inner dimension; the
    norms and the mean of ``R`` are summed in ATen's CPU order
    (:mod:`jax_impl.cpu_reductions`); ``1/√`` is an IEEE square root
    and division (``rsqrt_``). ``α_t`` and the clipping divisor are Python
    float64 maths on the ``.item()`` of two float32 norms: here they run on
    the host through a ``jax.pure_callback`` each step (one per parameter), so
    a step compiled inside :func:`~jax_impl.optim.fixed_horizon` still holds a
    callback. ``ε₁ = None`` is ``torch.finfo(dtype).eps`` of each parameter's
    dtype (torch takes the first parameter's, the same for a tree of one dtype).

    ``foreach=True`` follows torch's multi-tensor path, which differs in the
    last operation only: it rounds the scaled update ``U · (-α_t / max(1,
    RMS(U)/d))`` into its own tensor and then adds it to ``p`` (two
    roundings), where the single-tensor ``p.add_(U, alpha=...)`` is one FMA.

    Args:
      lr: γ, the cap of the relative step size and the weight decay factor
        (float or host schedule).
      beta2_decay: τ <= 0, the exponent of the second-moment decay.
      eps: (ε₁, ε₂): ε₁ floors the variance estimate (``None``: the dtype's
        machine epsilon); ε₂ floors the parameter RMS in the step size.
      d: the clipping threshold on the update RMS, >= 1.
      weight_decay: λ, decoupled, scaled by γ.
      maximize: ascend instead of descend.
      foreach: torch's multi-tensor path (``True``) or the single-tensor one
        (``None``, torch's CPU default, or ``False``).
    """
    if not callable(lr) and not 0.0 <= lr:
        raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
    if not 0.0 >= beta2_decay:
        raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
    eps1, eps2 = eps
    if eps1 is not None and not 0.0 <= eps1:
        raise ValueError(f"epsilon1 should be >= 0 but is: {eps1}")
    if not 0.0 <= eps2:
        raise ValueError(f"epsilon2 should be >= 0 but is: {eps2}")
    if not 1.0 <= d:
        raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
    multi_tensor = bool(foreach)
    if callable(lr) and not is_host_schedule(lr):
        raise NotImplementedError(
            "adafactor: lr must be a float or a host schedule (jax_impl.optim.host_schedule / lr_scheduler): "
            "torch's step size min(lr, 1/sqrt(t)) is float64 host maths")

    def lr_at(count: int) -> float:
        return float(lr(count)) if callable(lr) else float(lr)

    def host_scalars(step, h, sstate):
        t = float(step)  # torch reads its float32 step tensor with .item()
        return {"one_minus_beta2": t**beta2_decay, "decay": 1 - h["lr"] * weight_decay}, {}

    def host_alpha(step: Any, param_norm: Any, update_norm: Any, numel: int, dtype: np.dtype) -> np.ndarray:
        """torch's ``-alpha / denom`` in Python float64, rounded to the dtype as ``add_(alpha=...)`` rounds it."""
        t = float(step)
        rho = min(lr_at(int(step) - 1), 1 / (t**0.5))
        alpha = max(eps2, float(param_norm) / (numel**0.5)) * rho
        denom = max(1.0, float(update_norm) / ((numel**0.5) * d))
        return np.asarray(-alpha / denom, dtype)

    def init_leaf(p):
        if p.ndim > 1:
            return (_buffers.zeros((*p.shape[:-1], 1), p.dtype, p),
                    _buffers.zeros((*p.shape[:-2], 1, p.shape[-1]), p.dtype, p), None)
        return None, None, _buffers.zeros_like(p)

    def norm(ops, x):
        return norm2_rows(ops, x.reshape(1, -1))[0]

    def update_leaf(ops, c, step, g, p, row_var, col_var, variance):
        g = negate_if(maximize, g)
        e1 = float(np.finfo(p.dtype).eps) if eps1 is None else eps1
        param_norm = norm(ops, p)  # before the weight decay, as torch reads it
        if weight_decay != 0:
            p = ops.mul(p, c["decay"])
        w = c["one_minus_beta2"]
        if g.ndim > 1:
            m, n = g.shape[-2:]
            lead = g.shape[:-2]
            rows = g.reshape(-1, n)
            row_norm = norm2_rows(ops, rows).reshape(*lead, m, 1)
            col_norm = norm2_columns(ops, g.reshape(-1, m, n)).reshape(*lead, 1, n)
            row_mean = divide(ops, ops.rounded(row_norm * row_norm), jnp.asarray(n, g.dtype))
            row_var = ops.lerp(row_var, row_mean, w)
            col_mean = divide(ops, ops.rounded(col_norm * col_norm), jnp.asarray(m, g.dtype))
            col_var = ops.lerp(col_var, col_mean, w)
            estimate = ops.rounded(row_var * col_var)  # (..., m, 1) @ (..., 1, n): one product per element
            row_var_mean = divide(ops, sum_rows(row_var.reshape(-1, m)), jnp.asarray(m, g.dtype))
            floor = jnp.maximum(row_var_mean, jnp.asarray(e1, g.dtype)).reshape(*lead, 1, 1)
            estimate = divide(ops, estimate, floor)
        else:
            variance = ops.lerp(variance, ops.mul(g, g), w)
            estimate = variance
        estimate = jnp.maximum(estimate, jnp.asarray(e1 * e1, g.dtype))
        update = ops.mul(ops.rounded(1 / ops.rounded(jnp.sqrt(estimate))), g)
        update_norm = norm(ops, update)
        dtype = np.dtype(p.dtype)
        scale = jax.pure_callback(
            lambda s, a, b: host_alpha(s, a, b, int(np.prod(p.shape, dtype=np.int64)), dtype),
            jax.ShapeDtypeStruct((), p.dtype), step, param_norm, update_norm, vmap_method="sequential")
        if multi_tensor:  # _foreach_mul_(updates, alphas), then _foreach_add_(params, updates)
            return p + ops.mul(update, scale), row_var, col_var, variance
        return ops.add(p, update, scale), row_var, col_var, variance

    return torch_optimizer(
        state_cls=AdafactorState,
        hyper={"lr": lr},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("row_var", "col_var", "variance"),
    )
