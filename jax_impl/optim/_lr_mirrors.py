"""Mirrors of torch's LR-scheduler classes (``torch/optim/lr_scheduler.py``, torch 2.13).

Each class keeps the state torch's does (``last_epoch``, ``_step_count``,
``_is_initial``, ``base_lr``) and copies its ``get_lr`` / closed-form
expressions in torch's order, acting on a dict that stands for the single
param group (``'lr'``, ``'initial_lr'``, and ``'momentum'`` for SGD's
momentum or Adam's ``betas[0]``). Several mirrors built on one dict share
``group['lr']`` exactly as torch's sub-schedulers of ``SequentialLR`` and
``ChainedScheduler`` do. :mod:`jax_impl.optim.lr_scheduler` wraps them as
host schedules.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter


class SchedulerMirror:
    """``LRScheduler``: constructor sets ``initial_lr`` and takes the initial step."""

    has_closed_form = False

    def __init__(self, group: dict) -> None:
        self.group = group
        group.setdefault("initial_lr", group["lr"])
        self.base_lr = group["initial_lr"]
        self.last_epoch = -1
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def step(self) -> None:
        self._step_count += 1
        self._update_lr(None)

    def _update_lr(self, epoch: int | None) -> None:
        if epoch is None:
            self.last_epoch += 1
            value = self.get_lr()
        else:
            self.last_epoch = epoch
            value = self.closed_form() if self.has_closed_form else self.get_lr()
        self.group["lr"] = value
        self._last_lr = value

    def get_lr(self) -> float:
        raise NotImplementedError

    def closed_form(self) -> float:
        raise NotImplementedError


class LambdaLRMirror(SchedulerMirror):
    def __init__(self, group, lr_lambda):
        self.lr_lambda = lr_lambda
        super().__init__(group)

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeLRMirror(SchedulerMirror):
    def __init__(self, group, lr_lambda):
        self.lr_lambda = lr_lambda
        super().__init__(group)

    def get_lr(self):
        if not self._is_initial:
            return self.group["lr"] * self.lr_lambda(self.last_epoch)
        return self.group["lr"]


class StepLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, step_size, gamma):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(group)

    def get_lr(self):
        if (self.last_epoch == 0) or (self.last_epoch % self.step_size != 0):
            return self.group["lr"]
        return self.group["lr"] * self.gamma

    def closed_form(self):
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class MultiStepLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, milestones, gamma):
        self.milestones, self.gamma = Counter(milestones), gamma
        super().__init__(group)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self.group["lr"]
        return self.group["lr"] * self.gamma ** self.milestones[self.last_epoch]

    def closed_form(self):
        milestones = sorted(self.milestones.elements())
        return self.base_lr * self.gamma ** bisect_right(milestones, self.last_epoch)


class ConstantLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, factor, total_iters):
        self.factor, self.total_iters = factor, total_iters
        super().__init__(group)

    def get_lr(self):
        if self.last_epoch == 0:
            return self.group["lr"] * self.factor
        if self.last_epoch != self.total_iters:
            return self.group["lr"]
        return self.group["lr"] * (1.0 / self.factor)

    def closed_form(self):
        return self.base_lr * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))


class LinearLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, start_factor, end_factor, total_iters):
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(group)

    def get_lr(self):
        if self.last_epoch == 0:
            return self.group["lr"] * self.start_factor
        if self._is_initial or self.last_epoch > self.total_iters:
            return self.group["lr"]
        return self.group["lr"] * (
            1.0
            + (self.end_factor - self.start_factor)
            / (self.total_iters * self.start_factor + (self.last_epoch - 1) * (self.end_factor - self.start_factor))
        )

    def closed_form(self):
        return self.base_lr * (
            self.start_factor
            + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) / self.total_iters
        )


class ExponentialLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, gamma):
        self.gamma = gamma
        super().__init__(group)

    def get_lr(self):
        if self._is_initial:
            return self.group["lr"]
        return self.group["lr"] * self.gamma

    def closed_form(self):
        return self.base_lr * self.gamma**self.last_epoch


class PolynomialLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, total_iters, power):
        self.total_iters, self.power = total_iters, power
        super().__init__(group)

    def get_lr(self):
        if self._is_initial or self.last_epoch > self.total_iters:
            return self.group["lr"]
        decay_factor = (
            (1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)
        ) ** self.power
        return self.group["lr"] * decay_factor

    def closed_form(self):
        return self.base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power


class CosineAnnealingLRMirror(SchedulerMirror):
    has_closed_form = True

    def __init__(self, group, T_max, eta_min):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(group)

    def get_lr(self):
        if self._is_initial:
            return self.group["lr"]
        elif self._step_count == 1 and self.last_epoch > 0:
            return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos((self.last_epoch) * math.pi / self.T_max)) / 2
        elif (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return self.group["lr"] + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
        return (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / (
            1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max)
        ) * (self.group["lr"] - self.eta_min) + self.eta_min

    def closed_form(self):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class CosineAnnealingWarmRestartsMirror(SchedulerMirror):
    def __init__(self, group, T_0, T_mult, eta_min):
        self.T_0 = self.T_i = T_0
        self.T_mult, self.eta_min = T_mult, eta_min
        self.T_cur = -1
        super().__init__(group)

    def get_lr(self):
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2

    def step(self):  # torch overrides step(); only the epoch=None path is reproduced
        if self.last_epoch < 0:
            self.T_i, self.T_cur, epoch = self.T_0, 0, 0
        else:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        self.last_epoch = math.floor(epoch)
        self.group["lr"] = self._last_lr = self.get_lr()


def _cycle_momentum(group: dict, max_momentum: float, base_momentum: float) -> None:
    group["momentum"] = max_momentum
    group["max_momentum"] = max_momentum
    group["base_momentum"] = base_momentum


class CyclicLRMirror(SchedulerMirror):
    def __init__(self, group, base_lr, max_lr, step_size_up, step_size_down, mode, gamma, scale_fn, scale_mode,
                 cycle_momentum, base_momentum, max_momentum):
        group["lr"] = base_lr
        self.max_lr = max_lr
        step_size_up = float(step_size_up)
        step_size_down = float(step_size_down) if step_size_down is not None else step_size_up
        self.total_size = step_size_up + step_size_down
        self.step_ratio = step_size_up / self.total_size
        self.mode, self.gamma, self._scale_fn_custom, self.scale_mode = mode, gamma, scale_fn, scale_mode
        if scale_fn is None:
            if mode == "triangular":
                self._scale_fn_ref, self.scale_mode = (lambda x: 1.0), "cycle"
            elif mode == "triangular2":
                self._scale_fn_ref, self.scale_mode = (lambda x: 1 / (2.0 ** (x - 1))), "cycle"
            elif mode == "exp_range":
                self._scale_fn_ref, self.scale_mode = (lambda x: gamma**x), "iterations"
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.base_momentum, self.max_momentum = base_momentum, max_momentum
            _cycle_momentum(group, max_momentum, base_momentum)
        super().__init__(group)
        self.base_lr = base_lr

    def scale_fn(self, x):
        return self._scale_fn_custom(x) if self._scale_fn_custom is not None else self._scale_fn_ref(x)

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale_x = cycle if self.scale_mode == "cycle" else self.last_epoch
        base_height = (self.max_lr - self.base_lr) * scale_factor
        lr = self.base_lr + base_height * self.scale_fn(scale_x)
        if self.cycle_momentum:
            base_height = (self.max_momentum - self.base_momentum) * scale_factor
            self.group["momentum"] = self.max_momentum - base_height * self.scale_fn(scale_x)
        return lr


class OneCycleLRMirror(SchedulerMirror):
    def __init__(self, group, max_lr, total_steps, pct_start, anneal_strategy, cycle_momentum, base_momentum,
                 max_momentum, div_factor, final_div_factor, three_phase):
        self.total_steps = total_steps
        if three_phase:
            self._phases = [
                (float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        self._anneal = self._annealing_cos if anneal_strategy == "cos" else self._annealing_linear
        group["initial_lr"] = max_lr / div_factor
        group["max_lr"] = max_lr
        group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            _cycle_momentum(group, max_momentum, base_momentum)
        super().__init__(group)

    @staticmethod
    def _annealing_cos(start, end, pct):
        cos_out = math.cos(math.pi * pct) + 1
        return end + (start - end) / 2.0 * cos_out

    @staticmethod
    def _annealing_linear(start, end, pct):
        return (end - start) * pct + start

    def get_lr(self):
        step_num, group = self.last_epoch, self.group
        if step_num > self.total_steps:
            raise ValueError(f"Tried to step {step_num} times. The specified number of total steps is {self.total_steps}")
        start_step = 0.0
        for i, (end_step, start_lr, end_lr, start_m, end_m) in enumerate(self._phases):
            if step_num <= end_step or i == len(self._phases) - 1:
                pct = (step_num - start_step) / (end_step - start_step)
                computed_lr = self._anneal(group[start_lr], group[end_lr], pct)
                if self.cycle_momentum:
                    group["momentum"] = self._anneal(group[start_m], group[end_m], pct)
                return computed_lr
            start_step = end_step


class SequentialLRMirror(SchedulerMirror):
    def __init__(self, group, schedulers, milestones):  # no LRScheduler.__init__, as in torch
        self.group, self._schedulers, self._milestones = group, schedulers, milestones
        self.last_epoch = 0
        group["lr"] = group["initial_lr"]
        self.recursive_undo()
        self._schedulers[bisect_right(self._milestones, 0)]._initial_step()
        self._last_lr = self._schedulers[bisect_right(self._milestones, 0)]._last_lr

    def recursive_undo(self, sched=None):
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self):
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler._last_lr


class ChainedSchedulerMirror(SchedulerMirror):
    def __init__(self, group, schedulers):  # no initial step of its own, as in torch
        self.group, self._schedulers = group, schedulers
        self._last_lr = group["lr"]

    def step(self):
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = self.group["lr"]

    def _update_lr(self, epoch):
        raise NotImplementedError("a chained_scheduler cannot follow a milestone of sequential_lr")
