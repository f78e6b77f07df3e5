"""torch_ref.optim.build_optimizer builds torch's own optimizer classes from a config section."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import torch_ref.optim

from parity.config import OptimizerConfig
from torch_ref.optim import build_optimizer, optimizer_spec


def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(2, 2))]


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"])
def test_builds_torch_class_with_defaults(name: str) -> None:
    optimizer = build_optimizer({"name": name}, params())
    assert type(optimizer) is getattr(torch.optim, name)
    assert optimizer.param_groups[0]["lr"] == getattr(torch.optim, name)(params()).param_groups[0]["lr"]


def test_from_config_section_with_yaml_lists() -> None:
    optimizer = build_optimizer(OptimizerConfig("Adam", {"lr": 0.05, "betas": [0.8, 0.99]}), params())
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.param_groups[0]["lr"] == 0.05
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.99)  # a tuple, as torch's default is


def test_from_dict_and_module() -> None:
    module = torch.nn.Linear(3, 2)
    optimizer = build_optimizer({"name": "SGD", "lr": 0.1, "momentum": 0.9}, module)
    assert optimizer.param_groups[0]["momentum"] == 0.9
    assert len(optimizer.param_groups[0]["params"]) == 2


def test_matches_direct_construction_step() -> None:
    built, direct = params(), params()
    a = build_optimizer({"name": "Rprop", "etas": [0.4, 1.3]}, built)
    b = torch.optim.Rprop(direct, etas=(0.4, 1.3))
    for opt, ps in ((a, built), (b, direct)):
        for p in ps:
            p.grad = torch.full_like(p, 0.5)
        opt.step()
    assert all(torch.equal(x, y) for x, y in zip(built, direct))


def test_unknown_name_raises_value_error() -> None:
    with pytest.raises(ValueError, match="'Adamm'"):
        build_optimizer({"name": "Adamm"}, params())
    with pytest.raises(ValueError, match="'lr_scheduler'"):
        build_optimizer({"name": "lr_scheduler"}, params())
    with pytest.raises(ValueError, match="name"):
        optimizer_spec({"lr": 0.1})


def test_bad_hyperparameters_are_torch_errors() -> None:
    with pytest.raises(ValueError, match="Invalid learning rate"):
        build_optimizer({"name": "Adam", "lr": -1.0}, params())


def test_torch_ref_does_not_import_jax() -> None:
    """Every import statement in torch_ref/optim.py, function-level ones included (no subprocess: ~4 s)."""
    tree = ast.parse(Path(torch_ref.optim.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name.split(".")[0] for name in imported} & {"jax", "jaxlib", "flax", "optax", "jax_impl", "parity"}
