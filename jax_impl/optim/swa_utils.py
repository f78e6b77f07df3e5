"""``torch.optim.swa_utils``: weight averaging (SWA/EMA), ``SWALR`` and ``update_bn``.

torch's :class:`AveragedModel` is a module holding a deep copy of the model
and a ``n_averaged`` counter. Here the averaged weights are a pytree state
and the class holds only the averaging rule::

    swa = AveragedModel(multi_avg_fn=get_ema_multi_avg_fn(0.999))
    state = swa.init(params, buffers)              # torch's deepcopy(model)
    state = swa.update_parameters(state, params, buffers)

``params`` / ``buffers`` are any pytrees (e.g. ``nnx.state(model, nnx.Param)``
and ``nnx.state(model, nnx.BatchStat)``). The averaging functions reproduce
torch's CPU kernels rounding for rounding (:class:`jax_impl.kernels.TorchOps`):

- default (no function): torch's CPU path, :func:`get_swa_avg_fn` per tensor,
  ``averaged + (current - averaged) / (n_averaged + 1)`` (IEEE division);
- :func:`get_swa_multi_avg_fn`: ``lerp(averaged, current, 1 / (n_averaged + 1))``,
  the weight a float32 tensor (torch's default dtype) read as a scalar;
- :func:`get_ema_multi_avg_fn`: ``lerp(ema, current, 1 - decay)`` (ATen's two FMA branches);
- :func:`get_ema_avg_fn`: ``decay * ema + (1 - decay) * current``, two rounded products.

Integer leaves (BatchNorm's ``num_batches_tracked`` with ``use_buffers=True``)
follow torch too: float32 arithmetic truncated back by ``copy_``, and the
integer ``addcdiv`` error of :func:`get_swa_multi_avg_fn`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_impl.kernels import TorchOps, div_scalar, lerp_branch, runtime_zero
from jax_impl.optim._lr_mirrors import SchedulerMirror
from jax_impl.optim.lr_scheduler import TorchSchedule

__all__ = [
    "AveragedModel",
    "AveragedModelState",
    "SWALR",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
    "swa_lr_schedule",
    "swalr",
    "update_bn",
]

AvgFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
MultiAvgFn = Callable[[Sequence[jax.Array], Sequence[jax.Array], jax.Array], list[jax.Array]]

# torch computes integer averages in its default dtype and copies them back.
_DEFAULT_FLOAT = jnp.float32


def _is_float(x: jax.Array) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.floating))


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


@jax.jit
def _swa_mean(averaged: jax.Array, current: jax.Array, num_averaged: jax.Array) -> jax.Array:
    if _is_float(averaged):
        divisor = (num_averaged + 1).astype(averaged.dtype)
        return averaged + div_scalar(current - averaged, divisor)
    # int - int stays integer; int / long is a float32 true division; int + float32 is float32.
    quotient = div_scalar((current - averaged).astype(_DEFAULT_FLOAT), (num_averaged + 1).astype(_DEFAULT_FLOAT))
    return averaged.astype(_DEFAULT_FLOAT) + quotient


def get_swa_avg_fn() -> AvgFn:
    """torch's ``get_swa_avg_fn``: ``averaged + (current - averaged) / (num_averaged + 1)``.

    One subtraction, one IEEE division by the integer count (in the
    parameter's dtype; float32 for integer tensors), one addition.
    """
    return _swa_mean


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """torch's ``get_ema_avg_fn``: ``decay * ema + (1 - decay) * current``.

    Both products round on their own (torch runs three kernels), then one
    addition; ``decay`` and ``1 - decay`` (float64 on the host) round to the
    tensor's dtype (float32 for integer tensors, torch's default dtype).
    """
    _check_decay(decay)

    @jax.jit
    def ema_update(ema: jax.Array, current: jax.Array, num_averaged: jax.Array) -> jax.Array:
        ops = TorchOps(runtime_zero(jnp.asarray(num_averaged)))
        dtype = ema.dtype if _is_float(ema) else _DEFAULT_FLOAT
        return ops.mul(ema.astype(dtype), jnp.asarray(decay, dtype)) + ops.mul(
            current.astype(dtype), jnp.asarray(1 - decay, dtype)
        )

    return ema_update


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """torch's ``get_ema_multi_avg_fn``: ``torch._foreach_lerp_(ema, current, 1 - decay)``.

    Pure: returns the new list. Floating tensors take ATen's scalar-weight
    lerp (``fma(w, b - a, a)`` for ``|w| < 0.5``, else ``fma(w - 1, b - a, b)``);
    integer tensors take torch's fallback ``ema * decay + current * (1 - decay)``
    in float32, truncated by ``copy_``.
    """
    _check_decay(decay)
    small_weight = lerp_branch(1 - decay)

    @jax.jit
    def one(ema: jax.Array, current: jax.Array, num_averaged: jax.Array) -> jax.Array:
        ops = TorchOps(runtime_zero(jnp.asarray(num_averaged)))
        if _is_float(ema):
            return ops.lerp(ema, current, jnp.asarray(1 - decay, ema.dtype), small_weight)
        f = _DEFAULT_FLOAT
        value = ops.mul(ema.astype(f), jnp.asarray(decay, f)) + ops.mul(current.astype(f), jnp.asarray(1 - decay, f))
        return value.astype(ema.dtype)

    def ema_update(ema_list: Sequence[jax.Array], current_list: Sequence[jax.Array], num_averaged: jax.Array):
        return [one(e, c, num_averaged) for e, c in zip(ema_list, current_list, strict=True)]

    return ema_update


@jax.jit
def _swa_lerp(averaged: jax.Array, current: jax.Array, num_averaged: jax.Array) -> jax.Array:
    ops = TorchOps(runtime_zero(jnp.asarray(num_averaged)))
    # `1 / (num_averaged + 1)` on a long tensor is a float32 tensor (reciprocal, then * 1).
    weight = (1 / (num_averaged + 1).astype(_DEFAULT_FLOAT)).astype(averaged.dtype)
    return ops.lerp(averaged, current, weight)


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """torch's ``get_swa_multi_avg_fn``: ``torch._foreach_lerp_(averaged, current, 1 / (num_averaged + 1))``.

    Pure: returns the new list. The weight is torch's float32 tensor
    ``1 / (n + 1)`` (also for float64 tensors). Integer tensors raise torch's
    integer ``addcdiv`` error.
    """

    def swa_update(averaged_list: Sequence[jax.Array], current_list: Sequence[jax.Array], num_averaged: jax.Array):
        if averaged_list and not _is_float(averaged_list[0]):
            raise RuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will "
                "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented "
                "as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the "
                "latter implementation: (input + value * tensor1 / tensor2), for all dtypes."
            )
        return [_swa_lerp(a, c, num_averaged) for a, c in zip(averaged_list, current_list, strict=True)]

    return swa_update


class AveragedModelState(NamedTuple):
    """The averaged model: torch's ``swa_model.module`` parameters and buffers, and ``n_averaged``.

    ``buffers`` is ``None`` when the model has none.
    """

    params: Any
    buffers: Any
    n_averaged: jax.Array


class AveragedModel:
    """``torch.optim.swa_utils.AveragedModel`` as an averaging rule over parameter pytrees.

    ``update_parameters`` reproduces torch's: the first call (``n_averaged ==
    0``) copies the model's parameters; later calls apply ``avg_fn(averaged,
    current, n_averaged)`` per tensor, or ``multi_avg_fn(averaged_list,
    current_list, n_averaged)`` once per dtype (torch groups tensors by device
    and dtype), or, with neither, torch's CPU default :func:`get_swa_avg_fn`
    per tensor. With ``use_buffers`` the buffers are averaged with the
    parameters (chained after them, as torch chains ``parameters()`` and
    ``buffers()``); otherwise they are copied from the model on every call.
    Results are cast back to each averaged tensor's dtype (``copy_``).

    Args:
      avg_fn: ``(averaged, current, n_averaged) -> new averaged`` per tensor.
      multi_avg_fn: ``(averaged_list, current_list, n_averaged) -> new list``;
        pure, where torch's updates the list in place.
      use_buffers: average the buffers too.
    """

    def __init__(self, avg_fn: AvgFn | None = None, multi_avg_fn: MultiAvgFn | None = None,
                 use_buffers: bool = False) -> None:
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def init(self, params: Any, buffers: Any = None) -> AveragedModelState:
        """A copy of the model's parameters and buffers, ``n_averaged = 0`` (torch's constructor)."""
        copy = lambda tree: jax.tree.map(jnp.array, tree)  # noqa: E731
        return AveragedModelState(copy(params), copy(buffers), jnp.zeros((), jax.dtypes.canonicalize_dtype(jnp.int64)))

    def update_parameters(self, state: AveragedModelState, params: Any, buffers: Any = None) -> AveragedModelState:
        """torch's ``update_parameters(model)`` with the model's current ``params`` and ``buffers``."""
        n = state.n_averaged
        if isinstance(n, jax.core.Tracer):
            raise NotImplementedError(
                "AveragedModel.update_parameters under jax.jit: torch branches on n_averaged == 0 on the host"
            )
        avg_trees = (state.params, state.buffers) if self.use_buffers else (state.params,)
        cur_trees = (params, buffers) if self.use_buffers else (params,)
        avg_leaves, treedef = jax.tree.flatten(avg_trees)
        cur_leaves = treedef.flatten_up_to(cur_trees)
        if int(n) == 0:
            new_leaves = [jnp.array(c, dtype=a.dtype) for a, c in zip(avg_leaves, cur_leaves)]
        else:
            new_leaves = self._average(avg_leaves, [jnp.asarray(c).astype(a.dtype) for a, c in zip(avg_leaves, cur_leaves)], n)
        new_trees = jax.tree.unflatten(treedef, new_leaves)
        new_params = new_trees[0]
        if self.use_buffers:
            new_buffers = new_trees[1]
        else:  # keep the buffers in sync with the source model
            new_buffers = jax.tree.map(lambda b, m: jnp.array(m, dtype=b.dtype), state.buffers, buffers)
        return AveragedModelState(new_params, new_buffers, n + 1)

    def _average(self, avg_leaves: list[jax.Array], cur_leaves: list[jax.Array], n: jax.Array) -> list[jax.Array]:
        if self.avg_fn is not None and self.multi_avg_fn is None:
            return [jnp.asarray(self.avg_fn(a, c, n)).astype(a.dtype) for a, c in zip(avg_leaves, cur_leaves)]
        if self.multi_avg_fn is None:  # torch's CPU default: get_swa_avg_fn tensor by tensor
            return [jnp.asarray(_swa_mean(a, c, n)).astype(a.dtype) for a, c in zip(avg_leaves, cur_leaves)]
        groups: dict[Any, list[int]] = {}
        for i, a in enumerate(avg_leaves):
            groups.setdefault(jnp.dtype(a.dtype), []).append(i)
        out = list(avg_leaves)
        for indices in groups.values():
            new = self.multi_avg_fn([avg_leaves[i] for i in indices], [cur_leaves[i] for i in indices], n)
            for i, value in zip(indices, new, strict=True):
                out[i] = jnp.asarray(value).astype(avg_leaves[i].dtype)
        return out


# --------------------------------------------------------------------------
# update_bn
# --------------------------------------------------------------------------


def update_bn(loader: Iterable[Any], model: Any, device: Any = None) -> None:
    """``torch.optim.swa_utils.update_bn``: recompute BatchNorm running statistics with one pass over ``loader``.

    Every ``BatchNorm1d/2d/3d``/``SyncBatchNorm`` of the ``jax_impl.nn`` model
    gets ``reset_running_stats()`` and ``momentum = None`` (the cumulative
    average ``running = running + (batch - running) / num_batches_tracked``);
    the model runs in train mode on each batch (a batch that is a list or
    tuple contributes its first element); then the momenta and the model's
    train/eval mode are restored. The model is updated in place. ``device``:
    batches are put there with ``jax.device_put``.
    """
    from flax import nnx

    from jax_impl.nn import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm

    momenta = {}
    for _, module in nnx.iter_graph(model):
        if isinstance(module, (BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm)) and id(module) not in momenta:
            module.reset_running_stats()
            momenta[id(module)] = (module, module.momentum)
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module, _ in momenta.values():
        module.momentum = None
    for batch in loader:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        if device is not None:
            batch = jax.device_put(batch, device)
        model(batch)
    for module, momentum in momenta.values():
        module.momentum = momentum
    model.train(was_training)


# --------------------------------------------------------------------------
# SWALR
# --------------------------------------------------------------------------


class SWALRMirror(SchedulerMirror):
    """torch's ``SWALR`` on a param-group dict: ``get_lr`` recursive on the group's current lr."""

    def __init__(self, group: dict, swa_lr: float, anneal_epochs: int, anneal_strategy: str) -> None:
        group["swa_lr"] = swa_lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(group)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lr = self._get_initial_lr(self.group["lr"], self.group["swa_lr"], prev_alpha)
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return self.group["swa_lr"] * alpha + prev_lr * (1 - alpha)


def _one_group(name: str, value: Any) -> Any:
    """torch's ``_format_param`` for the single param group modelled here."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. "
                f"{name} has {len(value)} values, param_groups has 1."
            )
        return value[0]
    return value


def swalr(base_lr: float, swa_lr: float, anneal_epochs: int = 10, anneal_strategy: str = "cos") -> TorchSchedule:
    r"""``SWALR(optimizer, swa_lr, anneal_epochs=10, anneal_strategy='cos')`` alone on an optimizer with lr ``base_lr``.

    torch's ``get_lr`` at scheduler step ``s`` (``s = _step_count - 1``, at
    least 1 when ``anneal_epochs == 0``) undoes the previous step's blend to
    recover the lr it started from, then blends again:

    .. math::
        \alpha(t) &= t \text{ (linear) or } (1 - \cos \pi t)/2 \text{ (cos)}, \quad
        t_s = \operatorname{clip}(s / \max(1, E), 0, 1) \\
        \ell_{prev} &= \ell_{swa} \text{ if } \alpha(t_{s-1}) = 1 \text{ else }
          (\ell - \alpha(t_{s-1})\,\ell_{swa}) / (1 - \alpha(t_{s-1})) \\
        \ell &\leftarrow \ell_{swa}\,\alpha(t_s) + \ell_{prev}\,(1 - \alpha(t_s))

    all in Python float64 in torch's order, ``ℓ`` being the group's current lr.
    """
    swa_lr = _one_group("swa_lr", swa_lr)
    return TorchSchedule("swalr", base_lr, lambda g: SWALRMirror(g, swa_lr, anneal_epochs, anneal_strategy))


class _SwitchMirror:
    """torch's SWA recipe: ``scheduler.step()`` while ``epoch <= swa_start``, then ``swa_scheduler.step()``."""

    def __init__(self, scheduler: SchedulerMirror, swa_scheduler: SchedulerMirror, swa_start: int) -> None:
        self.scheduler, self.swa_scheduler, self.swa_start = scheduler, swa_scheduler, swa_start
        self.epoch = 0

    def step(self) -> None:
        if self.epoch > self.swa_start:
            self.swa_scheduler.step()
        else:
            self.scheduler.step()
        self.epoch += 1


def swa_lr_schedule(base_lr: float, scheduler: TorchSchedule, swa_scheduler: TorchSchedule,
                    swa_start: int) -> TorchSchedule:
    """The lr of torch's SWA recipe: both schedulers built on one optimizer (``scheduler`` first), then::

        for epoch in range(...):
            train(...)
            if epoch > swa_start: swa_scheduler.step()
            else: scheduler.step()

    ``schedule(k)`` is the lr after ``k`` such epochs (the constructors'
    initial steps included, as both share the group's lr in torch).
    """
    for i, s in enumerate((scheduler, swa_scheduler)):
        if not isinstance(s, TorchSchedule):
            raise TypeError(f"swa_lr_schedule: argument {i} should be a schedule built by jax_impl.optim.")
        if s.base_lr is not None and s.base_lr != base_lr:
            raise ValueError(f"swa_lr_schedule expects both schedulers to belong to the same optimizer, "
                             f"but {s.name} has base_lr={s.base_lr!r}, not {base_lr!r}.")
    if not isinstance(swa_start, int):
        raise TypeError(f"swa_start must be an int, got {swa_start!r}")

    def build(group):
        return _SwitchMirror(scheduler.build(group), swa_scheduler.build(group), swa_start)

    schedule = TorchSchedule("swa_lr_schedule", base_lr, build)
    schedule.children = (scheduler, swa_scheduler)
    return schedule


# torch's class name, for ``from torch.optim.swa_utils import SWALR`` ports.
SWALR = swalr
