"""torch's own float32 precision floor: how far torch's float32 run of a config is from its float64 run.

A float32 parity bound below this floor cannot be met by any implementation
that is not bit-identical to torch's kernels: training amplifies rounding
itself (ReLU and max-pool ties, BatchNorm-bias gradients that are
cancellation residues, Adam steps of lr size on gradients that are rounding
noise). The runner trains a :class:`FloorReference` beside a float32 run: the
same torch model in float64, the same optimizer, scheduler and batches. Its
distance from torch's float32 run is the floor.

The verdict: a float32 run passes when JAX is within ``train.tolerance``
**or** no farther from torch than :data:`FLOOR_FACTOR` times torch's own
float32-vs-float64 distance. Two float32 runs each off the exact trajectory
by about the floor can be twice the floor apart, and chaotic growth
multiplies unequal starting errors; the ratio measured on runs with a correct
port (LeNet on digits: Adam lr 0.01, 270 steps: 0.15 / 0.16 = 0.9; batch 64,
46 steps: 2.9e-4 / 1.0e-4 = 2.9) stays below it, while a porting bug moves the
JAX run away at every step, beyond any multiple of a small floor.
"""

from __future__ import annotations

import copy
import math
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import torch

from parity.build import build_experiment, torch_optimizer
from parity.compare import scaled_error
from parity.torch_step import micro_batch_groups, step_loss, torch_train_step

__all__ = ["FLOOR_FACTOR", "FloorReference", "divergence_message", "judge", "torch_precision_floor"]

FLOOR_FACTOR = 5.0


class FloorReference:
    """torch's float32 run's twin in float64, stepped on the same batches.

    Built from the torch side as it is (at step 0, or restored from a
    checkpoint): a float64 copy of the model, the same optimizer config with
    the float32 optimizer's state (torch casts it on loading), the scheduler's
    state. Restored from a checkpoint, the twin starts where torch's float32
    run had already drifted from its float64 run; ``carried`` (per tensor, the
    distance recorded when the checkpoint was written) is added to every later
    distance, the triangle inequality's bound for the whole run.
    """

    def __init__(self, exp: Any, carried: dict[str, float] | None = None) -> None:
        from torch_ref.lr_scheduler import build_scheduler

        cfg = exp.config
        self.interval = cfg.scheduler.interval if cfg.scheduler is not None else None
        self.model = copy.deepcopy(exp.torch_model).double()
        self.optimizer, _ = torch_optimizer(cfg.optimizer, self.model)
        self.scheduler = build_scheduler(cfg.scheduler, self.optimizer) if cfg.scheduler is not None else None
        if self.scheduler is not None:
            self.scheduler.load_state_dict(copy.deepcopy(exp.t_sched.state_dict()))
        # A deep copy: torch's state_dict shares its tensors (Adam's `step` among them), and loading it
        # after the scheduler restores the groups' lr and betas the scheduler's constructor reset.
        self.optimizer.load_state_dict(copy.deepcopy(exp.t_opt.state_dict()))
        self.loss_fn = getattr(torch.nn, cfg.train.loss.name)(**cfg.train.loss.kwargs)
        self.train = cfg.train
        self.carried = {k: v for k, v in (carried or {}).items() if v == v}  # NaN: no floor was recorded

    def step(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """One optimizer step on the float32 run's micro-batches (one batch without ``train.accumulate``), with
        its gradient clipping; returns the step's loss (:func:`parity.torch_step.step_loss`)."""
        self.model.train()
        losses = torch_train_step(self.model, self.loss_fn, self.optimizer, micro_batches, dtype=torch.float64,
                                  **_step_options(self.train))
        if self.scheduler is not None and self.interval == "step":
            self.scheduler.step()
        return step_loss(losses)

    def end_epoch(self) -> None:
        if self.scheduler is not None and self.interval == "epoch":
            self.scheduler.step()

    def distances(self, torch_model: torch.nn.Module, *, buffers: bool = False) -> dict[str, float]:
        """Per parameter (and with ``buffers`` per BatchNorm running statistic), ``max |f32 - f64| / max |f64|``:
        torch's float32 run against this float64 run."""
        ref = self.model.state_dict()
        names = [k for k, _ in torch_model.named_parameters()]
        if buffers:
            names += [k for k in ref if "running_" in k]
        ours = torch_model.state_dict()
        return {k: scaled_error(ours[k].detach().double().numpy(), ref[k].detach().numpy()) + self.carried.get(k, 0.0)
                for k in names}

    def distance(self, torch_model: torch.nn.Module) -> tuple[float, str]:
        """``(max rel, worst parameter)`` of :meth:`distances`."""
        errors = self.distances(torch_model)
        worst = max(errors, key=errors.get)
        return errors[worst], worst


def _step_options(train: Any) -> dict[str, Any]:
    """:func:`parity.torch_step.torch_train_step`'s clip and accumulation options of ``train`` (a TrainConfig)."""
    return {"accumulate": train.accumulate, "clip_grad_norm": train.clip_grad_norm,
            "norm_type": train.clip_grad_norm_type}


def judge(report: Any, rtol: float) -> None:
    """The verdict on a report's last epoch, set on ``report`` (a :class:`parity.report.RunReport`): within
    ``rtol``, or within :data:`FLOOR_FACTOR` times torch's own float32 floor (``passed_by == "floor"``)."""
    last = report.epochs[-1]
    report.passed, report.passed_by, report.message = last.param_max_rel <= rtol, "tolerance", ""
    if not report.passed and last.floor_max_rel > 0 and last.param_max_rel <= FLOOR_FACTOR * last.floor_max_rel:
        report.passed, report.passed_by = True, "floor"
        report.message = (f"{FLOOR_FACTOR:g}x torch's own float32-vs-float64 distance ({last.floor_max_rel:.2g} at "
                          f"{last.floor_worst})")


def divergence_message(last: Any, rtol: float, first_step: int | None) -> str:
    """The failed verdict's sentence: the worst tensor beyond ``rtol`` and beyond the floor, and the first
    step whose losses differ (``last`` is the last :class:`parity.report.EpochRecord`)."""
    floor = "" if math.isnan(last.floor_max_rel) else (
        f" and beyond {FLOOR_FACTOR:g}x torch's own float32 floor ({last.floor_max_rel:.3g})")
    return (f"parameters diverged beyond rtol {rtol:g}{floor}: worst tensor {last.worst_leaf} (max rel "
            f"{last.param_max_rel:.3g}); first step whose losses differ: {first_step}")


def torch_precision_floor(cfg: Any, steps: int) -> dict[str, Any]:
    """How far torch's own float32 run of ``cfg`` is from its float64 run after ``steps`` steps.

    The same model, weights, batches, optimizer, scheduler and loss as the
    runner's torch side, trained twice (float32, float64); returns
    ``{"max_rel": float, "worst": name}`` with the runner's measure
    (``max |f32 - f64| / max |f64|`` per parameter, worst over parameters).
    """
    runs = {}
    for dtype in ("float32", "float64"):
        # The runner's own build (models, user data sets, transforms), so both runs read its batches; its JAX
        # side is unused, built in its dtype.
        with jax.enable_x64(dtype == "float64"):
            exp = build_experiment(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, dtype=dtype)))
        model, sched = exp.torch_model.train(), exp.t_sched
        step = 0
        while step < steps:
            for batches in micro_batch_groups(exp.t_train, cfg.train.accumulate):
                if step >= steps:
                    break
                # train.autocast applies to the float32 run only: the float64 one is the exact trajectory.
                autocast = getattr(torch, cfg.train.autocast) if cfg.train.autocast and dtype == "float32" else None
                torch_train_step(model, exp.t_loss, exp.t_opt, batches, dtype=exp.t_dtype,
                                 autocast=autocast, **_step_options(cfg.train))
                step += 1
                if sched is not None and cfg.scheduler.interval == "step":
                    sched.step()
            else:
                if sched is not None and cfg.scheduler.interval == "epoch":
                    sched.step()
        runs[dtype] = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
    errors = {k: scaled_error(runs["float32"][k], runs["float64"][k]) for k in runs["float64"]}
    worst = max(errors, key=errors.get)
    return {"max_rel": errors[worst], "worst": worst}
