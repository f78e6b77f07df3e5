"""torch_ref.lr_scheduler.build_scheduler builds torch's own scheduler classes from a config section."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest
import torch
from torch.optim import lr_scheduler

import torch_ref.lr_scheduler
from parity.config import SchedulerConfig, config_from_dict
from torch_ref.lr_scheduler import build_scheduler, scheduler_class, scheduler_spec


def make_optimizer(lr: float = 0.1) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=lr, momentum=0.9)


def lrs(scheduler: lr_scheduler.LRScheduler, optimizer: torch.optim.Optimizer, n: int) -> list[float]:
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scheduler.step() without optimizer.step()
        for _ in range(n):
            scheduler.step()
            out.append(optimizer.param_groups[0]["lr"])
    return out


@pytest.mark.parametrize(
    ("section", "direct"),
    [
        ({"name": "StepLR", "step_size": 3, "gamma": 0.5}, lambda o: lr_scheduler.StepLR(o, 3, 0.5)),
        ({"name": "ExponentialLR", "gamma": 0.9}, lambda o: lr_scheduler.ExponentialLR(o, 0.9)),
        ({"name": "LinearLR"}, lambda o: lr_scheduler.LinearLR(o)),
        ({"name": "CosineAnnealingLR", "T_max": 7}, lambda o: lr_scheduler.CosineAnnealingLR(o, 7)),
        ({"name": "OneCycleLR", "max_lr": 1.0, "total_steps": 30}, lambda o: lr_scheduler.OneCycleLR(o, 1.0, 30)),
        ({"name": "MultiStepLR", "milestones": [2, 5]}, lambda o: lr_scheduler.MultiStepLR(o, [2, 5])),
        ({"name": "CyclicLR", "base_lr": [0.01], "max_lr": [0.1], "step_size_up": 4},
         lambda o: lr_scheduler.CyclicLR(o, [0.01], [0.1], 4)),
    ],
    ids=["step", "exponential", "linear", "cosine", "one-cycle", "multi-step", "cyclic-lists"],
)
def test_builds_torch_class_like_direct_construction(section, direct) -> None:
    built_opt, direct_opt = make_optimizer(), make_optimizer()
    built = build_scheduler(section, built_opt)
    assert type(built) is getattr(lr_scheduler, section["name"])
    assert lrs(built, built_opt, 30) == lrs(direct(direct_opt), direct_opt, 30)


def test_from_config_section_drops_interval_and_makes_tuples() -> None:
    section = SchedulerConfig("StepLR", {"step_size": 2}, interval="step")
    name, kwargs = scheduler_spec(section)
    assert (name, kwargs) == ("StepLR", {"step_size": 2})
    assert scheduler_spec({"name": "CyclicLR", "base_lr": [0.1], "max_lr": [1.0], "interval": "epoch"}) == (
        "CyclicLR", {"base_lr": (0.1,), "max_lr": (1.0,)})
    assert isinstance(build_scheduler(section, make_optimizer()), lr_scheduler.StepLR)


def test_sequential_with_nested_sections_from_yaml_like_dict() -> None:
    raw = {"name": "SequentialLR", "milestones": [4], "interval": "step", "schedulers": [
        {"name": "LinearLR", "start_factor": 0.25, "total_iters": 4},
        {"name": "StepLR", "step_size": 3, "gamma": 0.5}]}
    section = config_from_dict({"model": {"name": "LeNet"}, "optimizer": {"name": "SGD", "lr": 0.1}, "scheduler": raw}).scheduler
    direct_opt = make_optimizer()
    direct = lr_scheduler.SequentialLR(
        direct_opt, [lr_scheduler.LinearLR(direct_opt, 0.25, total_iters=4), lr_scheduler.StepLR(direct_opt, 3, 0.5)], [4])
    expected = lrs(direct, direct_opt, 20)
    for source in (raw, section):
        optimizer = make_optimizer()
        scheduler = build_scheduler(source, optimizer)
        assert isinstance(scheduler, lr_scheduler.SequentialLR)
        assert all(s.optimizer is optimizer for s in scheduler._schedulers)
        assert lrs(scheduler, optimizer, 20) == expected


def test_chained_scheduler_on_the_same_optimizer() -> None:
    optimizer = make_optimizer()
    scheduler = build_scheduler(
        {"name": "ChainedScheduler", "schedulers": [{"name": "ConstantLR", "factor": 0.5, "total_iters": 3},
                                                    {"name": "ExponentialLR", "gamma": 0.9}]}, optimizer)
    assert isinstance(scheduler, lr_scheduler.ChainedScheduler)
    assert scheduler.optimizer is optimizer
    direct_opt = make_optimizer()
    direct = lr_scheduler.ChainedScheduler(
        [lr_scheduler.ConstantLR(direct_opt, 0.5, 3), lr_scheduler.ExponentialLR(direct_opt, 0.9)])
    assert lrs(scheduler, optimizer, 10) == lrs(direct, direct_opt, 10)


def test_reduce_lr_on_plateau_is_built() -> None:
    scheduler = build_scheduler({"name": "ReduceLROnPlateau", "patience": 2}, make_optimizer())
    assert isinstance(scheduler, lr_scheduler.ReduceLROnPlateau) and scheduler.patience == 2


def test_unknown_names_raise_value_error() -> None:
    for name in ("StepLRR", "LRScheduler", "Optimizer", "_LRScheduler"):
        with pytest.raises(ValueError, match="unknown scheduler"):
            scheduler_class(name)
    with pytest.raises(ValueError, match="name"):
        scheduler_spec({"step_size": 3})


def test_bad_hyperparameters_are_torch_errors() -> None:
    with pytest.raises(ValueError, match="factor"):
        build_scheduler({"name": "ConstantLR", "factor": 2.0}, make_optimizer())
    with pytest.raises(TypeError):
        build_scheduler({"name": "StepLR", "step_size": 2, "no_such_arg": 1}, make_optimizer())


def test_torch_ref_does_not_import_jax() -> None:
    """Every import statement in torch_ref/lr_scheduler.py, function-level ones included."""
    tree = ast.parse(Path(torch_ref.lr_scheduler.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name.split(".")[0] for name in imported} & {"jax", "jaxlib", "flax", "optax", "jax_impl", "parity"}
