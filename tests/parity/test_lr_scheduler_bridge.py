"""parity.lr_scheduler: the same scheduler section gives torch's lr sequence and state dict on the JAX side.

Each case builds the real torch scheduler (``torch_ref.lr_scheduler``) and the
jax_impl schedule (``parity.lr_scheduler``) from one section and compares them
with ``==``: 300 lrs, ``state_dict()`` after k steps, and a resume from a
torch checkpoint.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch

from jax_impl.optim import lr_scheduler as S
from parity.config import SchedulerConfig, config_from_dict
from parity.lr_scheduler import (
    build_jax_schedule,
    jax_schedule_factory,
    load_scheduler_state,
    scheduler_state_dict,
)
from tests.test_torch_ref_lr_scheduler import (
    lrs as step_torch,  # n torch steps -> the n new lrs
)
from torch_ref.lr_scheduler import build_scheduler

BASE_LR = 0.1
STEPS = 300

# (test id, section, optimizer): every jax_impl scheduler, with non-default options.
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("step", {"name": "StepLR", "step_size": 7, "gamma": 0.5}, "SGD"),
    ("multi-step", {"name": "MultiStepLR", "milestones": [10, 50, 50, 120], "gamma": 0.3}, "SGD"),
    ("constant", {"name": "ConstantLR", "factor": 0.3, "total_iters": 40}, "SGD"),
    ("linear", {"name": "LinearLR", "start_factor": 0.1, "end_factor": 0.9, "total_iters": 100}, "SGD"),
    ("exponential", {"name": "ExponentialLR", "gamma": 0.97}, "SGD"),
    ("polynomial", {"name": "PolynomialLR", "total_iters": 200, "power": 2.0}, "SGD"),
    ("cosine", {"name": "CosineAnnealingLR", "T_max": 90, "eta_min": 1e-4}, "SGD"),
    ("warm-restarts", {"name": "CosineAnnealingWarmRestarts", "T_0": 10, "T_mult": 2, "eta_min": 1e-5}, "SGD"),
    ("cyclic", {"name": "CyclicLR", "base_lr": 0.01, "max_lr": 0.2, "step_size_up": 25, "mode": "triangular2"}, "SGD"),
    ("cyclic-exp-adam", {"name": "CyclicLR", "base_lr": 0.01, "max_lr": 0.2, "step_size_up": 20,
                         "step_size_down": 35, "mode": "exp_range", "gamma": 0.995}, "Adam"),
    ("one-cycle", {"name": "OneCycleLR", "max_lr": 0.5, "total_steps": STEPS}, "SGD"),
    ("one-cycle-3phase-linear", {"name": "OneCycleLR", "max_lr": 0.5, "epochs": 10, "steps_per_epoch": 30,
                                 "anneal_strategy": "linear", "three_phase": True}, "Adam"),
    ("sequential", {"name": "SequentialLR", "milestones": [20, 150], "schedulers": [
        {"name": "LinearLR", "start_factor": 0.01, "total_iters": 20},
        {"name": "CosineAnnealingLR", "T_max": 130},
        {"name": "ExponentialLR", "gamma": 0.99}]}, "SGD"),
    ("chained", {"name": "ChainedScheduler", "schedulers": [
        {"name": "ConstantLR", "factor": 0.5, "total_iters": 30},
        {"name": "ExponentialLR", "gamma": 0.98}]}, "SGD"),
]
CASE_IDS = [case[0] for case in CASES]
STATE_CASES = [case for case in CASES if case[0] not in ("sequential", "chained")]


def make_optimizer(name: str) -> torch.optim.Optimizer:
    params = [torch.nn.Parameter(torch.zeros(2))]
    if name == "Adam":
        return torch.optim.Adam(params, lr=BASE_LR)
    return torch.optim.SGD(params, lr=BASE_LR, momentum=0.9)


def momentum_of(optimizer: torch.optim.Optimizer) -> float:
    group = optimizer.param_groups[0]
    return group["betas"][0] if "betas" in group else group["momentum"]


@pytest.mark.parametrize(("section", "opt"), [case[1:] for case in CASES], ids=CASE_IDS)
def test_same_lr_sequence_for_300_steps(section: dict[str, Any], opt: str) -> None:
    optimizer = make_optimizer(opt)
    scheduler = build_scheduler(section, optimizer)
    schedule = build_jax_schedule(section, BASE_LR)
    torch_lrs = [optimizer.param_groups[0]["lr"]]
    torch_momenta = [momentum_of(optimizer)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(STEPS):
            scheduler.step()
            torch_lrs.append(optimizer.param_groups[0]["lr"])
            torch_momenta.append(momentum_of(optimizer))
    assert [schedule(k) for k in range(STEPS + 1)] == torch_lrs
    if schedule.momentum is not None:
        assert [schedule.momentum(k) for k in range(STEPS + 1)] == torch_momenta


def test_sequential_from_yaml_like_config() -> None:
    raw = {
        "model": {"name": "LeNet"},
        "optimizer": {"name": "SGD", "lr": BASE_LR},
        "scheduler": {"name": "SequentialLR", "milestones": [5], "interval": "step", "schedulers": [
            {"name": "LinearLR", "start_factor": 0.25, "total_iters": 5},
            {"name": "StepLR", "step_size": 10, "gamma": 0.5}]},
    }
    section = config_from_dict(raw).scheduler
    assert isinstance(section, SchedulerConfig) and section.interval == "step"
    assert all(isinstance(sub, SchedulerConfig) for sub in section.kwargs["schedulers"])
    optimizer = make_optimizer("SGD")
    scheduler = build_scheduler(section, optimizer)
    assert isinstance(scheduler, torch.optim.lr_scheduler.SequentialLR)
    schedule = build_jax_schedule(section, BASE_LR)
    assert [schedule(k) for k in range(1, 41)] == step_torch(scheduler, optimizer, 40)
    # The raw dict (what YAML gives) builds the same schedule as the parsed section.
    plain = build_jax_schedule(raw["scheduler"], BASE_LR)
    assert [plain(k) for k in range(41)] == [schedule(k) for k in range(41)]


@pytest.mark.parametrize(("section", "opt"), [case[1:] for case in STATE_CASES], ids=[c[0] for c in STATE_CASES])
@pytest.mark.parametrize("k", [0, 1, 13, 100])
def test_state_dict_matches_torch(section: dict[str, Any], opt: str, k: int) -> None:
    optimizer = make_optimizer(opt)
    scheduler = build_scheduler(section, optimizer)
    step_torch(scheduler, optimizer, k)
    schedule = build_jax_schedule(section, BASE_LR)
    assert scheduler_state_dict(schedule, k, use_beta1=opt == "Adam") == scheduler.state_dict()


def test_state_dict_of_lambda_schedulers() -> None:
    for name in ("LambdaLR", "MultiplicativeLR"):
        section = {"name": name, "lr_lambda": lambda epoch: 0.95}
        optimizer = make_optimizer("SGD")
        scheduler = build_scheduler(section, optimizer)
        step_torch(scheduler, optimizer, 5)
        assert scheduler_state_dict(build_jax_schedule(section, BASE_LR), 5) == scheduler.state_dict()


@pytest.mark.parametrize(("section", "opt"), [case[1:] for case in CASES], ids=CASE_IDS)
def test_resume_from_torch_checkpoint(section: dict[str, Any], opt: str) -> None:
    k, more = 37, 60
    optimizer = make_optimizer(opt)
    scheduler = build_scheduler(section, optimizer)
    step_torch(scheduler, optimizer, k)
    checkpoint = copy.deepcopy(scheduler.state_dict())
    # A fresh torch run restored from the checkpoint, as a training script would.
    resumed_opt = make_optimizer(opt)
    resumed = build_scheduler(section, resumed_opt)
    resumed.load_state_dict(checkpoint)
    resumed_opt.param_groups[0]["lr"] = checkpoint["_last_lr"][0]
    torch_lrs = step_torch(resumed, resumed_opt, more)
    assert torch_lrs == step_torch(scheduler, optimizer, more)  # the restored run continues the original

    schedule = build_jax_schedule(section, BASE_LR)
    simple = (section, opt) in [case[1:] for case in STATE_CASES]
    start = load_scheduler_state(checkpoint, schedule if simple else None)
    assert start == k
    assert [schedule(start + j) for j in range(1, more + 1)] == torch_lrs


def test_load_rejects_other_hyperparameters() -> None:
    optimizer = make_optimizer("SGD")
    scheduler = build_scheduler({"name": "StepLR", "step_size": 7}, optimizer)
    step_torch(scheduler, optimizer, 3)
    state = scheduler.state_dict()
    assert load_scheduler_state(state, build_jax_schedule({"name": "StepLR", "step_size": 7}, BASE_LR)) == 3
    with pytest.raises(ValueError, match="step_size"):
        load_scheduler_state(state, build_jax_schedule({"name": "StepLR", "step_size": 8}, BASE_LR))
    with pytest.raises(ValueError, match="base_lrs"):
        load_scheduler_state(state, build_jax_schedule({"name": "StepLR", "step_size": 7}, 0.2))
    with pytest.raises(ValueError, match="step count"):
        load_scheduler_state({"gamma": 0.1})


def test_doubly_nested_state_dict_not_provided() -> None:
    inner = {"name": "ChainedScheduler", "schedulers": [{"name": "ExponentialLR", "gamma": 0.9}]}
    section = {"name": "SequentialLR", "milestones": [2], "schedulers": [{"name": "ConstantLR"}, inner]}
    with pytest.raises(NotImplementedError, match="nested"):
        scheduler_state_dict(build_jax_schedule(section, BASE_LR), 1)


@pytest.mark.parametrize(
    ("name", "function"),
    [("CosineAnnealingWarmRestarts", "cosine_annealing_warm_restarts"), ("OneCycleLR", "one_cycle_lr"),
     ("StepLR", "step_lr"), ("MultiStepLR", "multi_step_lr"), ("SequentialLR", "sequential_lr"),
     ("ChainedScheduler", "chained_scheduler"), ("CyclicLR", "cyclic_lr"), ("LambdaLR", "lambda_lr")],
)
def test_factory_names(name: str, function: str) -> None:
    assert jax_schedule_factory(name).__name__ == function


def test_unknown_and_unsupported_names() -> None:
    with pytest.raises(ValueError, match="unknown scheduler"):
        build_jax_schedule({"name": "NoSuchLR"}, BASE_LR)
    try:
        from jax_impl.optim.plateau import ReduceLROnPlateau
    except ImportError:
        with pytest.raises(NotImplementedError, match="ReduceLROnPlateau"):
            build_jax_schedule({"name": "ReduceLROnPlateau"}, BASE_LR)
    else:
        plateau = build_jax_schedule({"name": "ReduceLROnPlateau", "patience": 2}, BASE_LR)
        assert isinstance(plateau, ReduceLROnPlateau)
    with pytest.raises(NotImplementedError, match="last_epoch"):
        build_jax_schedule({"name": "StepLR", "step_size": 3, "last_epoch": 4}, BASE_LR)


NESTED = [
    (
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=3), torch.optim.lr_scheduler.CosineAnnealingLR(o, 10)], milestones=[3]
        ),
        lambda: S.sequential_lr(0.1, schedulers=[S.linear_lr(0.1, start_factor=0.1, total_iters=3), S.cosine_annealing_lr(0.1, T_max=10)], milestones=[3]),
    ),
    (
        lambda o: torch.optim.lr_scheduler.ChainedScheduler([torch.optim.lr_scheduler.ExponentialLR(o, 0.9), torch.optim.lr_scheduler.StepLR(o, 2)]),
        lambda: S.chained_scheduler(0.1, schedulers=[S.exponential_lr(0.1, gamma=0.9), S.step_lr(0.1, step_size=2)]),
    ),
    (
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o,
            [torch.optim.lr_scheduler.ConstantLR(o, 0.5, total_iters=4), torch.optim.lr_scheduler.ExponentialLR(o, 0.95), torch.optim.lr_scheduler.StepLR(o, 3)],
            milestones=[4, 9],
        ),
        lambda: S.sequential_lr(
            0.1, schedulers=[S.constant_lr(0.1, factor=0.5, total_iters=4), S.exponential_lr(0.1, gamma=0.95), S.step_lr(0.1, step_size=3)], milestones=[4, 9]
        ),
    ),
]


@pytest.mark.parametrize("make_torch, make_ours", NESTED)
@pytest.mark.parametrize("k", [0, 1, 3, 4, 9, 10, 25])
def test_nested_state_dict_equals_torch(make_torch, make_ours, k):
    from parity.lr_scheduler import load_scheduler_state, scheduler_state_dict

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = make_torch(opt)
    for _ in range(k):
        opt.step()
        sched.step()
    ours = make_ours()
    assert scheduler_state_dict(ours, k) == sched.state_dict()
    assert load_scheduler_state(sched.state_dict(), ours) == k
