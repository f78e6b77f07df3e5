"""torch's LR schedulers as host schedules, reproducing ``torch.optim.lr_scheduler`` bit for bit.

``step_lr(0.1, step_size=30)(k)`` is torch's ``optimizer.param_groups[0]['lr']``
after ``k`` calls of ``StepLR(opt, step_size=30).step()`` (``k = 0`` right
after construction), as the same Python float. Pass the schedule as any
jax_impl optimizer's ``lr`` (it is a host schedule, see
:func:`jax_impl.optim._base.host_schedule`): the optimizer's update ``k`` then
uses the lr torch's would after ``k`` scheduler steps, i.e. the usual
``optimizer.step(); scheduler.step()`` loop.

How: torch's schedulers are mostly *recursive* ("chainable"): ``step()``
multiplies the lr currently in ``param_group['lr']``, so its float64 rounding
differs from the closed form (``ConstantLR(factor=1/3)`` does not return to
exactly ``base_lr``). Each schedule therefore replays torch's scheduler
objects literally: a small mirror of each torch class
(:mod:`jax_impl.optim._lr_mirrors`: same state, same
``get_lr`` expressions in the same order) acting on a dict standing for the
param group, stepped once per new ``k`` and cached, so ``schedule(k)`` is O(1)
amortised. ``sequential_lr``/``chained_scheduler`` build fresh mirrors of
their sub-schedules on one shared group, exactly as torch's sub-schedulers
share ``group['lr']`` (including the constructors' initial steps, SequentialLR's
``recursive_undo`` and its closed-form ``_update_lr(0)`` at a milestone).

Only one param group is modelled. ``last_epoch`` (resuming from a checkpoint)
is not offered; ``ReduceLROnPlateau`` is metric-driven and not provided here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from jax_impl.optim.plateau import (
    ReduceLROnPlateau,
    ReduceLROnPlateauState,
    reduce_lr_on_plateau_init,
    reduce_lr_on_plateau_step,
)
from jax_impl.optim._lr_mirrors import (
    ChainedSchedulerMirror,
    ConstantLRMirror,
    CosineAnnealingLRMirror,
    CosineAnnealingWarmRestartsMirror,
    CyclicLRMirror,
    ExponentialLRMirror,
    LambdaLRMirror,
    LinearLRMirror,
    MultiplicativeLRMirror,
    MultiStepLRMirror,
    OneCycleLRMirror,
    PolynomialLRMirror,
    SchedulerMirror,
    SequentialLRMirror,
    StepLRMirror,
)

__all__ = [
    "ReduceLROnPlateau",
    "ReduceLROnPlateauState",
    "TorchSchedule",
    "chained_scheduler",
    "constant_lr",
    "cosine_annealing_lr",
    "cosine_annealing_warm_restarts",
    "cyclic_lr",
    "exponential_lr",
    "lambda_lr",
    "linear_lr",
    "multi_step_lr",
    "multiplicative_lr",
    "one_cycle_lr",
    "per_epoch",
    "polynomial_lr",
    "reduce_lr_on_plateau",
    "reduce_lr_on_plateau_init",
    "reduce_lr_on_plateau_step",
    "sequential_lr",
    "step_lr",
]


# --------------------------------------------------------------------------
# Host schedules: cached Python-float sequences, callable under jax.jit.
# --------------------------------------------------------------------------


class _HostSequence:
    """``schedule(k) -> float`` on the host; a traced ``k`` goes through ``jax.pure_callback``."""

    is_host_schedule = True
    # A pure function of k: optimizers may tabulate it when their step is traced (see _base).
    tabulable = True

    def value(self, k: int) -> float:
        raise NotImplementedError

    def __call__(self, count: Any) -> Any:
        if isinstance(count, jax.core.Tracer):
            return jax.pure_callback(
                lambda c: np.float32(self.value(int(c))),
                jax.ShapeDtypeStruct((), np.float32),
                count,
                vmap_method="sequential",
            )
        k = int(count)
        if k < 0:
            raise ValueError(f"schedule count must be non-negative, got {k}")
        return self.value(k)


class _Field(_HostSequence):
    """One recorded field (``lr`` or ``momentum``) of a :class:`TorchSchedule`."""

    def __init__(self, owner: TorchSchedule, key: str) -> None:
        self.owner, self.key = owner, key

    def value(self, k: int) -> float:
        return self.owner.record(k)[self.key]

    def __repr__(self) -> str:
        return f"{self.owner!r}.{self.key}"


class TorchSchedule(_HostSequence):
    """torch's ``param_groups[0]['lr']`` after ``k`` scheduler steps, as a host schedule.

    ``build(group)`` constructs the torch-scheduler mirror on ``group`` (a dict
    holding ``'lr'``), as torch's constructor does on the optimizer's group.
    ``momentum`` is the scheduled momentum (SGD's ``momentum``, Adam's
    ``betas[0]``) when the scheduler cycles it, else ``None``.
    """

    def __init__(self, name: str, base_lr: float | None, build: Callable[[dict], SchedulerMirror]) -> None:
        self.name, self.base_lr, self.build = name, base_lr, build
        self._group: dict[str, Any] = {"lr": base_lr}
        self._scheduler = build(self._group)  # validates eagerly, like torch's constructor
        self._records = [self._snapshot()]
        self._error: Exception | None = None
        self.momentum = _Field(self, "momentum") if "momentum" in self._group else None

    def _snapshot(self) -> dict[str, float]:
        return {k: self._group[k] for k in ("lr", "momentum") if k in self._group}

    def record(self, k: int) -> dict[str, float]:
        while len(self._records) <= k:
            if self._error is not None:
                raise type(self._error)(*self._error.args)
            try:
                self._scheduler.step()
            except ValueError as e:  # OneCycleLR past total_steps: keep raising, as torch does
                self._error = e
                raise
            self._records.append(self._snapshot())
        return self._records[k]

    def value(self, k: int) -> float:
        return self.record(k)["lr"]

    def __repr__(self) -> str:
        return f"<{self.name} schedule, base_lr={self.base_lr!r}>"


class _PerEpoch(_HostSequence):
    def __init__(self, schedule: Callable[[int], float], steps_per_epoch: int) -> None:
        self.schedule, self.steps_per_epoch = schedule, steps_per_epoch
        self.tabulable = bool(getattr(schedule, "tabulable", False))

    def value(self, k: int) -> float:
        return float(self.schedule(k // self.steps_per_epoch))


def per_epoch(schedule: Callable[[int], float], steps_per_epoch: int) -> _HostSequence:
    """Update count ``u`` -> ``schedule(u // steps_per_epoch)``: a scheduler stepped once per epoch.

    The result has a ``momentum`` attribute likewise when ``schedule`` has one.
    """
    if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
        raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
    out = _PerEpoch(schedule, steps_per_epoch)
    momentum = getattr(schedule, "momentum", None)
    out.momentum = None if momentum is None else _PerEpoch(momentum, steps_per_epoch)
    return out


# --------------------------------------------------------------------------
# Public constructors: torch's keyword arguments, defaults and validation.
# --------------------------------------------------------------------------


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


def _one_lambda(lr_lambda: Any) -> Callable[[int], float]:
    if isinstance(lr_lambda, (list, tuple)):
        if len(lr_lambda) != 1:
            raise ValueError(f"Expected 1 lr_lambdas, but got {len(lr_lambda)}")
        return lr_lambda[0]
    return lr_lambda


def lambda_lr(base_lr: float, lr_lambda: Callable[[int], float]) -> TorchSchedule:
    """``LambdaLR``: ``base_lr * lr_lambda(epoch)``."""
    fn = _one_lambda(lr_lambda)
    return TorchSchedule("lambda_lr", base_lr, lambda g: LambdaLRMirror(g, fn))


def multiplicative_lr(base_lr: float, lr_lambda: Callable[[int], float]) -> TorchSchedule:
    """``MultiplicativeLR``: ``lr <- lr * lr_lambda(epoch)`` from epoch 1 on."""
    fn = _one_lambda(lr_lambda)
    if not callable(fn):
        raise TypeError(f"lr_lambda should be a function, but got {type(fn).__name__}")
    return TorchSchedule("multiplicative_lr", base_lr, lambda g: MultiplicativeLRMirror(g, fn))


def step_lr(base_lr: float, step_size: int, gamma: float = 0.1) -> TorchSchedule:
    """``StepLR``: ``lr <- lr * gamma`` every ``step_size`` epochs."""
    return TorchSchedule("step_lr", base_lr, lambda g: StepLRMirror(g, step_size, gamma))


def multi_step_lr(base_lr: float, milestones: Iterable[int], gamma: float = 0.1) -> TorchSchedule:
    """``MultiStepLR``: ``lr <- lr * gamma**count`` at each milestone (repeated milestones compound)."""
    milestones = list(milestones)
    return TorchSchedule("multi_step_lr", base_lr, lambda g: MultiStepLRMirror(g, milestones, gamma))


def constant_lr(base_lr: float, factor: float = 1.0 / 3, total_iters: int = 5) -> TorchSchedule:
    """``ConstantLR``: ``lr * factor`` until ``total_iters``, then ``lr * (1 / factor)``."""
    if factor > 1.0 or factor < 0:
        raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
    return TorchSchedule("constant_lr", base_lr, lambda g: ConstantLRMirror(g, factor, total_iters))


def linear_lr(base_lr: float, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5) -> TorchSchedule:
    """``LinearLR``: factor from ``start_factor`` to ``end_factor`` over ``total_iters``, recursively."""
    if start_factor > 1.0 or start_factor <= 0:
        raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
    if end_factor > 1.0 or end_factor < 0:
        raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
    return TorchSchedule("linear_lr", base_lr, lambda g: LinearLRMirror(g, start_factor, end_factor, total_iters))


def exponential_lr(base_lr: float, gamma: float) -> TorchSchedule:
    """``ExponentialLR``: ``lr <- lr * gamma`` every epoch."""
    return TorchSchedule("exponential_lr", base_lr, lambda g: ExponentialLRMirror(g, gamma))


def polynomial_lr(base_lr: float, total_iters: int = 5, power: float = 1.0) -> TorchSchedule:
    """``PolynomialLR``: ``lr <- lr * ((1 - e/T) / (1 - (e-1)/T))**power`` up to ``total_iters``."""
    return TorchSchedule("polynomial_lr", base_lr, lambda g: PolynomialLRMirror(g, total_iters, power))


def cosine_annealing_lr(base_lr: float, T_max: int, eta_min: float = 0.0) -> TorchSchedule:
    """``CosineAnnealingLR`` (recursive form; not clamped: past ``T_max`` the lr rises again)."""
    return TorchSchedule("cosine_annealing_lr", base_lr, lambda g: CosineAnnealingLRMirror(g, T_max, eta_min))


def cosine_annealing_warm_restarts(base_lr: float, T_0: int, T_mult: int = 1, eta_min: float = 0.0) -> TorchSchedule:
    """``CosineAnnealingWarmRestarts`` stepped without ``epoch`` (integer steps)."""
    if T_0 <= 0 or not isinstance(T_0, int):
        raise ValueError(f"Expected positive integer T_0, but got {T_0}")
    if T_mult < 1 or not isinstance(T_mult, int):
        raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
    if not isinstance(eta_min, (float, int)):
        raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type {type(eta_min)}")  # noqa: TRY004 - torch raises ValueError
    return TorchSchedule(
        "cosine_annealing_warm_restarts", base_lr, lambda g: CosineAnnealingWarmRestartsMirror(g, T_0, T_mult, eta_min)
    )


def cyclic_lr(
    base_lr: float,
    max_lr: float,
    step_size_up: int = 2000,
    step_size_down: int | None = None,
    mode: str = "triangular",
    gamma: float = 1.0,
    scale_fn: Callable[[float], float] | None = None,
    scale_mode: str = "cycle",
    cycle_momentum: bool = True,
    base_momentum: float = 0.8,
    max_momentum: float = 0.9,
) -> TorchSchedule:
    """``CyclicLR``. ``base_lr`` is CyclicLR's own argument (it overwrites the optimizer's lr).

    With ``cycle_momentum`` the schedule's ``momentum`` attribute drives SGD's
    ``momentum`` or Adam's ``betas[0]``.
    """
    base_lr, max_lr = _one_group("base_lr", base_lr), _one_group("max_lr", max_lr)
    if mode not in ["triangular", "triangular2", "exp_range"] and scale_fn is None:
        raise ValueError("mode is invalid and scale_fn is None")
    if cycle_momentum:
        base_momentum = _one_group("base_momentum", base_momentum)
        max_momentum = _one_group("max_momentum", max_momentum)
    args = (base_lr, max_lr, step_size_up, step_size_down, mode, gamma, scale_fn, scale_mode,
            cycle_momentum, base_momentum, max_momentum)
    schedule = TorchSchedule("cyclic_lr", base_lr, lambda g: CyclicLRMirror(g, *args))
    schedule.base_lr = None  # the optimizer's own lr is irrelevant: CyclicLR overwrites it
    return schedule


def one_cycle_lr(
    base_lr: float,
    max_lr: float,
    total_steps: int | None = None,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    pct_start: float = 0.3,
    anneal_strategy: str = "cos",
    cycle_momentum: bool = True,
    base_momentum: float = 0.85,
    max_momentum: float = 0.95,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
    three_phase: bool = False,
) -> TorchSchedule:
    """``OneCycleLR`` (ignores ``base_lr``, as torch ignores the optimizer's lr).

    ``schedule(k)`` raises torch's ``ValueError`` for ``k > total_steps``. With
    ``cycle_momentum`` the ``momentum`` attribute drives SGD's ``momentum`` or
    Adam's ``betas[0]``.
    """
    if total_steps is not None:
        if total_steps <= 0 or not isinstance(total_steps, int):
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
    elif epochs is not None and steps_per_epoch is not None:
        if not isinstance(epochs, int) or epochs <= 0:
            raise ValueError(f"Expected positive integer epochs, but got {epochs}")
        if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
            raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
        total_steps = epochs * steps_per_epoch
    else:
        raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
    if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
        raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
    if anneal_strategy not in ["cos", "linear"]:
        raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
    max_lr = _one_group("max_lr", max_lr)
    if cycle_momentum:
        max_momentum = _one_group("max_momentum", max_momentum)
        base_momentum = _one_group("base_momentum", base_momentum)
    args = (max_lr, total_steps, pct_start, anneal_strategy, cycle_momentum, base_momentum, max_momentum,
            div_factor, final_div_factor, three_phase)
    return TorchSchedule("one_cycle_lr", base_lr, lambda g: OneCycleLRMirror(g, *args))


def _check_subschedules(name: str, base_lr: float, schedulers: Sequence[Any], what: str) -> None:
    if len(schedulers) < 1:
        raise ValueError(f"{name} expects at least one scheduler{what}, but got no scheduler.")
    for i, s in enumerate(schedulers):
        if not isinstance(s, TorchSchedule):
            raise TypeError(f"{name} at index {i} should be a schedule built by jax_impl.optim.lr_scheduler.")
        # torch's "all schedulers must belong to the same optimizer": here, the same initial lr.
        if s.base_lr is not None and s.base_lr != base_lr:
            raise ValueError(
                f"{name} expects all schedulers to belong to the same optimizer, but got scheduler {s.name} at "
                f"index {i} with base_lr={s.base_lr!r}, which is different from base_lr={base_lr!r}."
            )


def sequential_lr(base_lr: float, schedulers: Sequence[TorchSchedule], milestones: Sequence[int]) -> TorchSchedule:
    """``SequentialLR``: ``schedulers[i]`` from ``milestones[i-1]`` on, restarted by its closed form at epoch 0."""
    _check_subschedules("SequentialLR", base_lr, schedulers, "")
    if len(milestones) != len(schedulers) - 1:
        raise ValueError(
            "Sequential Schedulers expects number of schedulers provided to be one more "
            f"than the number of milestone points, but got number of schedulers {len(schedulers)} and the "
            f"number of milestones to be equal to {len(milestones)}"
        )
    milestones = list(milestones)

    def build(group):  # the sub-schedulers are constructed on the shared group first, as in torch
        return SequentialLRMirror(group, [s.build(group) for s in schedulers], milestones)

    schedule = TorchSchedule("sequential_lr", base_lr, build)
    schedule.children = tuple(schedulers)
    return schedule


def chained_scheduler(base_lr: float, schedulers: Sequence[TorchSchedule]) -> TorchSchedule:
    """``ChainedScheduler``: every sub-scheduler steps the shared lr in turn."""
    _check_subschedules("ChainedScheduler", base_lr, schedulers, " to be chained")
    schedule = TorchSchedule("chained_scheduler", base_lr, lambda g: ChainedSchedulerMirror(g, [s.build(g) for s in schedulers]))
    schedule.children = tuple(schedulers)
    return schedule


# torch's name, snake_case like the others: a metric-driven host schedule.
reduce_lr_on_plateau = ReduceLROnPlateau
