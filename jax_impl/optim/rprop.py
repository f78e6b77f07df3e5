"""``torch.optim.Rprop``: resilient backpropagation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_impl.optim._transforms import negate_if
from jax_impl.optim import _buffers
from jax_impl.optim._base import TorchTransformation, check_torch_only_flags, torch_optimizer

__all__ = ["rprop", "RpropState"]


class RpropState(NamedTuple):
    count: jax.Array
    prev: Any
    step_size: Any


def rprop(
    lr: float = 1e-2,
    etas: tuple[float, float] = (0.5, 1.2),
    step_sizes: tuple[float, float] = (1e-6, 50),
    *,
    capturable: bool = False,
    foreach: bool | None = None,
    maximize: bool = False,
    differentiable: bool = False,
) -> TorchTransformation:
    r"""``torch.optim.Rprop``, step for step as torch's single-tensor CPU path.

    .. math::
        s &= \operatorname{sign}(g \cdot g_{prev}) \mapsto \eta_+ \ (>0),\ \eta_- \ (<0),\ 1 \ (=0) \\
        \Delta &\leftarrow \operatorname{clamp}(\Delta s, \Delta_{min}, \Delta_{max}), \qquad
        g \leftarrow 0 \text{ where } s = \eta_- \\
        p &\leftarrow p - \operatorname{sign}(g)\,\Delta, \qquad g_{prev} \leftarrow g

    Unlike ``optax.rprop`` the first step moves (``g_prev = 0`` gives factor 1)
    and a first-step ``lr`` outside ``step_sizes`` is clamped. ``lr`` is the
    initial step size Δ, so it cannot be a schedule.

    ``foreach=True`` (torch's multi-tensor path) is the same arithmetic on CPU:
    torch's ``_foreach_*`` kernels run the single-tensor kernels one tensor at
    a time, in this order, with the same host scalars, so every ``foreach``
    gives this result.
    """
    etaminus, etaplus = etas
    step_size_min, step_size_max = step_sizes
    if callable(lr):
        raise NotImplementedError("Rprop with an lr schedule: torch uses lr only as the initial step size")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 < etaminus < 1.0 < etaplus:
        raise ValueError(f"Invalid eta values: {etaminus}, {etaplus}")
    check_torch_only_flags(capturable=capturable, differentiable=differentiable)

    def host_scalars(step, h, sstate):
        return {"etaminus": etaminus, "etaplus": etaplus, "step_size_min": step_size_min, "step_size_max": step_size_max}, {}

    def init_leaf(p):
        return _buffers.zeros_like(p), _buffers.full_like(p, lr)

    def update_leaf(ops, c, step, g, p, prev, step_size):
        g = negate_if(maximize, g)
        # torch: sign(g * prev) (NaN -> 0), then > 0 -> etaplus, < 0 -> etaminus, 0 -> 1;
        # gradients whose sign flipped are zeroed (they are where the factor is etaminus).
        product = g * prev  # only compared, never added: no FMA to guard against
        factor = jnp.where(product > 0, c["etaplus"], jnp.where(product < 0, c["etaminus"], jnp.ones_like(product)))
        # Division by a run-time 1 (exact) marks the new step size as expensive, so XLA
        # computes it once instead of inside every consumer; see the note below.
        one = ops.one(p.dtype)
        step_size = jnp.clip(step_size * factor, c["step_size_min"], c["step_size_max"]) / one
        # Gradients whose sign flipped are zeroed (where the factor is etaminus). The
        # second term is always false (a step size starts at lr >= 0 and is only scaled
        # by positive factors) but makes the new `prev` depend on the new step size.
        keep = jnp.logical_not(product < 0) | (step_size < 0)
        prev = jnp.where(keep, g, jnp.zeros_like(g)) / one
        # torch: p.addcmul_(g.sign(), step_size, value=-1) with g zeroed where flipped,
        # which is the new `prev` (sign * step_size is exact: no rounding to match).
        p = p - ops.sign(prev) * step_size
        # Each output overwrites its own donated buffer: were all three to read the old
        # `prev`, XLA would copy `prev` and `step_size` first. So the old `prev` and
        # `step_size` are read only by the step-size kernel and the `prev` kernel, which
        # runs after it, and the parameter reads only new values.
        return p, prev, step_size

    return torch_optimizer(
        state_cls=RpropState,
        hyper={},
        host_scalars=host_scalars,
        init_leaf=init_leaf,
        update_leaf=update_leaf,
        leaf_state_names=("prev", "step_size"),
        step_dependent=False,
        elementwise=True,
    )
