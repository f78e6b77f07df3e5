"""Config schema: loading, torch-signature validation, overrides and error messages."""

import inspect
import re
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.config import ConfigError, config_from_dict, load_config, parse_override
from parity.config import registry

MINIMAL = {"model": {"name": "LeNet"}, "optimizer": {"name": "Adam"}}


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    return str(info.value)


def test_minimal_config_gets_defaults():
    config = config_from_dict(MINIMAL)
    assert config.train.epochs == 3 and config.train.dtype == "float32"
    assert config.data.dataset.name == "digits"
    assert config.scheduler is None and config.parallel is None
    assert config.train.loss.name == "CrossEntropyLoss"


def test_resolved_optimizer_kwargs_are_torchs_defaults():
    config = config_from_dict({**MINIMAL, "optimizer": {"name": "Adam", "lr": 0.01}})
    resolved = config.to_dict()["optimizer"]
    signature = inspect.signature(torch.optim.Adam.__init__).parameters
    assert resolved["lr"] == 0.01
    for key in ("betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay"):
        default = signature[key].default
        assert resolved[key] == (list(default) if isinstance(default, tuple) else default), key
    assert config.optimizer.kwargs == {"lr": 0.01}  # only what was given


def test_every_torch_optimizer_and_scheduler_is_known():
    optimizers = {n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type) and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)}
    assert optimizers - {"Optimizer"} <= set(registry.names("optimizer"))
    for name in ("StepLR", "OneCycleLR", "CosineAnnealingWarmRestarts", "ReduceLROnPlateau", "SequentialLR", "CyclicLR"):
        assert name in registry.names("scheduler")


def test_misspelled_key_names_path_and_suggestion():
    text = error_of({**MINIMAL, "optimizer": {"name": "Adam", "betas1": [0.9, 0.99]}})
    assert text == "optimizer.betas1: unknown key; did you mean optimizer.betas?"
    assert "train.epoch: unknown key; did you mean train.epochs?" in error_of({**MINIMAL, "train": {"epoch": 3}})
    assert "trian: unknown key; did you mean train?" in error_of({**MINIMAL, "trian": {}})
    assert "train.tolerance.rtoll: unknown key; did you mean train.tolerance.rtol?" in error_of(
        {**MINIMAL, "train": {"tolerance": {"rtoll": 1}}}
    )


def test_unknown_class_name_suggests():
    assert "optimizer.name: unknown optimizer 'adam'; did you mean 'Adam'?" in error_of({**MINIMAL, "optimizer": {"name": "adam"}})
    assert "scheduler.name: unknown LR scheduler 'StepRL'" in error_of({**MINIMAL, "scheduler": "StepRL"})


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"train": {"epochs": "three"}}, "train.epochs: expected int, got str ('three')"),
        ({"train": {"epochs": 2.5}}, "train.epochs: expected int, got float (2.5)"),
        ({"train": {"dtype": "float16"}}, "train.dtype: expected 'float32' | 'float64', got str ('float16')"),
        ({"data": {"shuffle": 1}}, "data.shuffle: expected bool, got int (1)"),
        ({"optimizer": {"name": "Adam", "betas": [0.9]}}, "optimizer.betas: expected tuple[float | a number or list of numbers (tensor), float | a number or list of numbers (tensor)] (2 items), got 1 items"),
        ({"optimizer": {"name": "Adam", "lr": True}}, "optimizer.lr: expected"),
        ({"optimizer": {"name": "SGD", "nesterov": "yes"}}, "optimizer.nesterov: expected bool, got str ('yes')"),
        ({"data": {"batch_size": 0}}, "data.batch_size: must be >= 1, got 0"),
        ({"parallel": {"world_size": 0}}, "parallel.world_size: must be >= 1, got 0"),
        ({"parallel": {"backend": "mpi"}}, "parallel.backend: expected 'auto' | 'gloo' | 'nccl', got str ('mpi')"),
        ({"parallel": {"sync_bn": True}}, "parallel.sync_bn: SyncBatchNorm needs a data-parallel run"),
        ({"optimizer": {"name": "SGD", "param_groups": [{"weight_decay": 0.0}]}},
         "optimizer.param_groups.0: missing required key 'params'"),
        ({"optimizer": {"name": "SGD", "param_groups": [{"params": "*.bias", "wd": 0.0}]}},
         "optimizer.param_groups.0.wd: unknown key"),
        ({"scheduler": {"name": "StepLR"}}, "scheduler.step_size: missing required key"),
        ({"scheduler": {"name": "StepLR", "step_size": 2, "interval": "batch"}}, "scheduler.interval: expected 'epoch' | 'step'"),
        ({"model": {"num_classes": 3}}, "model: missing required key 'name'"),
        ({"train": []}, "train: expected a mapping, got list"),
    ],
)
def test_type_errors_name_expected_type(raw, expected):
    merged = {**MINIMAL, **raw}
    assert expected in error_of(merged)


def test_missing_sections():
    assert "optimizer: missing required key" in error_of({"model": {"name": "LeNet"}})


def test_yaml_list_becomes_tuple_and_int_becomes_float():
    config = config_from_dict({**MINIMAL, "optimizer": {"name": "Adam", "betas": [0.9, 0.99], "lr": 1}})
    assert config.optimizer.kwargs["betas"] == (0.9, 0.99)
    assert config.optimizer.kwargs["lr"] == 1.0 and isinstance(config.optimizer.kwargs["lr"], float)


def test_nested_schedulers():
    config = config_from_dict(
        {**MINIMAL, "scheduler": {"name": "SequentialLR", "milestones": [2], "schedulers": [{"name": "LinearLR", "total_iters": 2}, {"name": "ExponentialLR", "gamma": 0.9}]}}
    )
    assert config.scheduler.kwargs["schedulers"][0].name == "LinearLR"
    assert "scheduler.schedulers.1.gamma: missing required key" in error_of(
        {**MINIMAL, "scheduler": {"name": "SequentialLR", "milestones": [2], "schedulers": ["LinearLR", "ExponentialLR"]}}
    )


def test_iterable_annotations_take_yaml_lists():
    # torch annotates MultiStepLR's milestones as Iterable[int].
    config = config_from_dict({**MINIMAL, "scheduler": {"name": "MultiStepLR", "milestones": [3, 6], "gamma": 0.5}})
    assert config.scheduler.kwargs["milestones"] == [3, 6]
    assert "scheduler.milestones.1: expected int" in error_of({**MINIMAL, "scheduler": {"name": "MultiStepLR", "milestones": [3, "x"]}})


def test_callables_cannot_be_configured():
    assert "scheduler.lr_lambda: expected Callable[[int], float] | list[Callable[[int], float]], got str" in error_of({**MINIMAL, "scheduler": {"name": "LambdaLR", "lr_lambda": "x"}})


def test_load_file_and_overrides(tmp_path):
    path = write(tmp_path, """
        model: {name: LeNet}
        optimizer: {name: Adam, lr: 0.001}
        train: {epochs: 2}
    """)
    config = load_config(path, ["optimizer.lr=0.5", "train.epochs=5", "optimizer.betas=[0.8, 0.9]", "train.loss.label_smoothing=0.1"])
    assert config.optimizer.kwargs == {"lr": 0.5, "betas": (0.8, 0.9)}
    assert config.train.epochs == 5
    assert config.train.loss.kwargs == {"label_smoothing": 0.1}


def test_exponent_floats_without_dot_are_floats(tmp_path):
    # YAML 1.1 (PyYAML) would read `1e-3` as a string.
    config = load_config(write(tmp_path, "model: LeNet\noptimizer: {name: Adam, lr: 1e-3, eps: -2E+2}\n"), ["optimizer.weight_decay=5e-4"])
    assert config.optimizer.kwargs == {"lr": 1e-3, "eps": -200.0, "weight_decay": 5e-4}


def test_errors_name_the_file(tmp_path):
    path = write(tmp_path, "model: {name: LeNet}\noptimizer: {name: Adam, betas1: 3}\n")
    with pytest.raises(ConfigError, match=f"{path}: optimizer.betas1: unknown key; did you mean optimizer.betas"):
        load_config(path)
    with pytest.raises(ConfigError, match="no such config file: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="optimizer.lrr: unknown key; did you mean optimizer.lr"):
        load_config(write(tmp_path, "model: LeNet\noptimizer: Adam\n", "ok.yaml"), ["optimizer.lrr=1"])


def test_duplicate_keys_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="duplicate key 'optimizer'"):
        load_config(write(tmp_path, "model: LeNet\noptimizer: Adam\noptimizer: SGD\n"))
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load_config(write(tmp_path, "- a\n- b\n"))


@pytest.mark.parametrize("text", ["no_equals", "=3", "a..b=1", "a.=1"])
def test_bad_override_syntax(text):
    with pytest.raises(ConfigError, match="not of the form dotted.key=value"):
        parse_override(text)


@settings(max_examples=60, deadline=None)
@given(lr=st.floats(1e-6, 10.0), momentum=st.floats(0.0, 0.99), nesterov=st.booleans(), epochs=st.integers(1, 50))
def test_drawn_overrides_round_trip(lr, momentum, nesterov, epochs):
    config = config_from_dict(MINIMAL)
    from parity.config import apply_overrides

    raw = apply_overrides(
        {"model": "LeNet", "optimizer": "SGD"},
        [f"optimizer.lr={lr!r}", f"optimizer.momentum={momentum!r}", f"optimizer.nesterov={str(nesterov).lower()}", f"train.epochs={epochs}"],
    )
    config = config_from_dict(raw)
    assert config.optimizer.kwargs == {"lr": lr, "momentum": momentum, "nesterov": nesterov}
    assert config.train.epochs == epochs
    # The resolved dict validates again to the same config (show -> validate round trip).
    again = config_from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()


def test_shipped_configs_validate():
    import pathlib

    files = sorted(pathlib.Path(__file__).resolve().parents[2].joinpath("configs").glob("*.yaml"))
    assert files
    for file in files:
        load_config(file)


@pytest.mark.parametrize("value", ["every", "last", "none"])
def test_train_checkpoint_choices(value):
    assert config_from_dict(MINIMAL).train.checkpoint == "every"  # a checkpoint after each epoch
    config = config_from_dict({**MINIMAL, "train": {"checkpoint": value}})
    assert config.train.checkpoint == value and config.to_dict()["train"]["checkpoint"] == value


@pytest.mark.parametrize("value, got", [("al", "str ('al')"), (False, "bool (False)"), (None, "NoneType (None)")])
def test_train_checkpoint_rejects_others(value, got):
    assert error_of({**MINIMAL, "train": {"checkpoint": value}}) == (
        f"train.checkpoint: expected 'every' | 'last' | 'none', got {got}")


def test_transforms_are_a_list_of_torchvision_names_with_their_arguments():
    cfg = load_config("lenet_digits", ["data.transform=[ToTensor, {name: Normalize, mean: [0.5], std: [0.2]}]"])
    assert [t.name for t in cfg.data.transform] == ["ToTensor", "Normalize"]
    assert cfg.data.transforms(train=False) == cfg.data.transform  # eval_transform defaults to the same list
    resolved = cfg.to_dict()["data"]["transform"]
    assert resolved == [{"name": "ToTensor"}, {"name": "Normalize", "mean": [0.5], "std": [0.2], "inplace": False}]
    assert "transform" not in load_config("lenet_digits").to_dict()["data"]  # omitted at its default


@pytest.mark.parametrize(("override", "message"), [
    ("data.transform=[Blur]", "data.transform.0.name: unknown transform 'Blur'; choose one of: Normalize,"),
    ("data.transform=[{name: Normalize}]", "data.transform.0.mean: missing required key"),
    ("data.transform=[{name: ToTensor, x: 1}]", "data.transform.0.x: unknown key"),
    ("data.eval_transform=3", "data.eval_transform: expected a list of transforms, got int (3)"),
    ("model.init=zero", "model.init: expected 'copy' | 'seed', got str ('zero')"),
])
def test_bad_transforms_and_init_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("lenet_digits", [override])
