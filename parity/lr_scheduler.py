"""The JAX twin of a torch LR scheduler from the same config section, and its state dict.

``build_jax_schedule({"name": "StepLR", "step_size": 30}, base_lr=0.1)`` is
``jax_impl.optim.lr_scheduler.step_lr(0.1, step_size=30)``, the counterpart of
``torch_ref.lr_scheduler.build_scheduler`` with the same section on an
optimizer whose ``lr`` is ``base_lr``.

:func:`scheduler_state_dict` gives what torch's ``scheduler.state_dict()``
holds after ``k`` steps, read off a fresh replay of the schedule's mirror
(:mod:`jax_impl.optim._lr_mirrors` keeps torch's own attributes);
:func:`load_scheduler_state` turns a torch checkpoint back into ``k``, so that
``schedule(k + j)`` continues it. Keys that cannot be reproduced from the
schedule alone:

* ``use_beta1`` (CyclicLR/OneCycleLR with ``cycle_momentum``): whether the
  optimizer has ``betas``; given by the caller (``use_beta1=``), default False
  (SGD).
* ``lr_lambdas`` (LambdaLR/MultiplicativeLR): torch stores ``None`` for a
  function and the ``__dict__`` of a callable object; ``None`` is written for
  every lambda.
* ``_scale_fn_custom`` (CyclicLR): ``None`` without a custom ``scale_fn``; a
  custom one is not serialisable in torch either and is written as ``None``.

These three are not checked by :func:`load_scheduler_state`. Nested
schedulers (``SequentialLR``, ``ChainedScheduler``) have no state dict here.
"""

from __future__ import annotations

import re
from typing import Any

from jax_impl.optim import lr_scheduler as jax_lr_scheduler
from jax_impl.optim.plateau import ReduceLROnPlateau
from torch_ref.lr_scheduler import NESTED_SCHEDULERS, scheduler_class, scheduler_spec

__all__ = ["build_jax_schedule", "jax_schedule_factory", "load_scheduler_state", "scheduler_state_dict"]

_NOT_CHECKED = frozenset({"use_beta1", "lr_lambdas", "_scale_fn_custom"})

# torch's own hyperparameter attributes, read off the mirror under the same names.
_HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "lambda_lr": (),
    "multiplicative_lr": (),
    "step_lr": ("step_size", "gamma"),
    "multi_step_lr": ("milestones", "gamma"),
    "constant_lr": ("factor", "total_iters"),
    "linear_lr": ("start_factor", "end_factor", "total_iters"),
    "exponential_lr": ("gamma",),
    "polynomial_lr": ("total_iters", "power"),
    "cosine_annealing_lr": ("T_max", "eta_min"),
    "cosine_annealing_warm_restarts": ("T_0", "T_i", "T_mult", "eta_min", "T_cur"),
    "cyclic_lr": ("total_size", "step_ratio", "mode", "gamma", "scale_mode", "cycle_momentum"),
    "one_cycle_lr": ("total_steps", "cycle_momentum"),
}


def _snake_case(name: str) -> str:
    """``CosineAnnealingWarmRestarts`` -> ``cosine_annealing_warm_restarts``, ``OneCycleLR`` -> ``one_cycle_lr``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def jax_schedule_factory(name: str) -> Any:
    """``jax_impl.optim.lr_scheduler.<snake_case(name)>`` for the torch scheduler class ``name``.

    ``ReduceLROnPlateau`` is ``jax_impl.optim.plateau.ReduceLROnPlateau``.

    Raises:
      ValueError: ``name`` is not a torch scheduler.
      NotImplementedError: torch has it, jax_impl does not.
    """
    scheduler_class(name)  # ValueError for names torch does not have
    if name == "ReduceLROnPlateau":
        return ReduceLROnPlateau
    snake = _snake_case(name)
    if snake not in jax_lr_scheduler.__all__:
        raise NotImplementedError(f"torch.optim.lr_scheduler.{name} has no jax_impl counterpart ({snake!r} is missing)")
    return getattr(jax_lr_scheduler, snake)


def build_jax_schedule(section: Any, base_lr: float) -> Any:
    """The jax_impl schedule for a scheduler section, on an optimizer whose lr is ``base_lr``.

    Args:
      section: ``parity.config.SchedulerConfig`` or ``{"name": "StepLR", ...}``
        with torch's keyword arguments; nested ``schedulers`` sections are built
        recursively with the same ``base_lr``.
      base_lr: the optimizer's initial ``lr``.

    Returns:
      A ``TorchSchedule`` (``schedule(k)`` is torch's lr after ``k`` steps).

    Raises:
      ValueError: unknown scheduler name, or invalid hyperparameters (as torch).
      NotImplementedError: a scheduler jax_impl lacks, or ``last_epoch`` other than -1.
    """
    name, kwargs = scheduler_spec(section)
    factory = jax_schedule_factory(name)
    if kwargs.pop("last_epoch", -1) != -1:
        raise NotImplementedError(f"{name}: resuming through last_epoch is not supported; use schedule(k + j)")
    if name in NESTED_SCHEDULERS:
        kwargs["schedulers"] = [build_jax_schedule(sub, base_lr) for sub in kwargs.get("schedulers", [])]
        kwargs.pop("optimizer", None)
    if "base_lr" in kwargs:  # CyclicLR's own base_lr overrides the optimizer's lr, as in torch
        return factory(**kwargs)
    return factory(base_lr, **kwargs)


def _replay(schedule: Any, k: int) -> Any:
    """A fresh mirror of ``schedule`` stepped ``k`` times, as torch's scheduler after ``k`` steps."""
    group: dict[str, Any] = {"lr": schedule.base_lr}
    mirror = schedule.build(group)
    for _ in range(k):
        mirror.step()
    return mirror


def _own_state(name: str, mirror: Any, use_beta1: bool) -> dict[str, Any]:
    state = {key: getattr(mirror, key) for key in _HYPERPARAMETERS[name]}
    momentum = getattr(mirror, "cycle_momentum", False)
    if name == "cyclic_lr":
        state["max_lrs"] = [mirror.max_lr]
        if momentum:
            state["base_momentums"], state["max_momentums"] = [mirror.base_momentum], [mirror.max_momentum]
        state["_scale_fn_custom"] = None
    elif name == "one_cycle_lr":
        keys = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
        state["_schedule_phases"] = [dict(zip(keys, phase)) for phase in mirror._phases]
        state["_anneal_func_type"] = "cos" if mirror._anneal == mirror._annealing_cos else "linear"
    elif name in ("lambda_lr", "multiplicative_lr"):
        state["lr_lambdas"] = [None]
    if momentum:
        state["use_beta1"] = use_beta1
    return state


def scheduler_state_dict(schedule: Any, k: int, *, use_beta1: bool = False) -> dict[str, Any]:
    """What torch's ``scheduler.state_dict()`` holds after ``k`` ``scheduler.step()`` calls.

    Args:
      schedule: a simple (non-nested) schedule from :mod:`jax_impl.optim.lr_scheduler`.
      k: the number of scheduler steps taken.
      use_beta1: for cycled momentum, whether the optimizer has ``betas`` (Adam family).

    ``sequential_lr`` and ``chained_scheduler`` give torch's nested form
    (``_schedulers``: one state dict per sub-scheduler).

    Raises:
      NotImplementedError: a nested schedule inside a nested schedule.
    """
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    mirror = _replay(schedule, k)
    if schedule.name == "sequential_lr":
        return {
            "_milestones": list(mirror._milestones),
            "last_epoch": mirror.last_epoch,
            "_last_lr": [mirror._last_lr],
            "_schedulers": [_simple_state(c, m, use_beta1) for c, m in zip(schedule.children, mirror._schedulers)],
        }
    if schedule.name == "chained_scheduler":
        return {
            "_last_lr": [mirror._last_lr],
            "_schedulers": [_simple_state(c, m, use_beta1) for c, m in zip(schedule.children, mirror._schedulers)],
        }
    return _simple_state(schedule, mirror, use_beta1)


def _simple_state(schedule: Any, mirror: Any, use_beta1: bool) -> dict[str, Any]:
    if schedule.name not in _HYPERPARAMETERS:
        raise NotImplementedError(f"no state dict for a {schedule.name!r} nested inside another nested schedule")
    return {
        **_own_state(schedule.name, mirror, use_beta1),
        "base_lrs": [mirror.base_lr],
        "last_epoch": mirror.last_epoch,
        "_step_count": mirror._step_count,
        "_is_initial": False,
        "_get_lr_called_within_step": False,
        "_last_lr": [mirror._last_lr],
    }


def load_scheduler_state(state_dict: dict[str, Any], schedule: Any = None) -> int:
    """The step count ``k`` a torch scheduler checkpoint was taken at: resume with ``schedule(k + j)``.

    Args:
      state_dict: torch's ``scheduler.state_dict()`` (``SequentialLR``'s too).
      schedule: when given, the schedule the run continues with; every key of
        :func:`scheduler_state_dict` after ``k`` steps (hyperparameters,
        ``base_lrs``, ``_last_lr``...) must equal the checkpoint's, except the
        unreproducible ones listed in the module docstring.

    Raises:
      ValueError: the checkpoint has no step count, or does not match ``schedule``.
    """
    k = state_dict.get("last_epoch")
    if k is None and state_dict.get("_schedulers"):  # ChainedScheduler: its sub-schedulers step together
        k = state_dict["_schedulers"][0].get("last_epoch")
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"the scheduler state has no step count (last_epoch >= 0), got {k!r}")
    if schedule is not None:
        expected = scheduler_state_dict(schedule, k, use_beta1=bool(state_dict.get("use_beta1", False)))
        mismatched = [
            f"{key}: checkpoint {state_dict.get(key, '<missing>')!r} != schedule {value!r}"
            for key, value in expected.items()
            if key not in _NOT_CHECKED and state_dict.get(key, object()) != value
        ]
        if mismatched:
            raise ValueError(f"scheduler state does not match {schedule!r} after {k} steps: " + "; ".join(mismatched))
    return k
