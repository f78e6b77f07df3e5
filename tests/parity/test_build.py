"""Building both sides of a run: transforms declared in the config, and ``model.init``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from examples.mnist_net import JaxNet, Net
from jax_impl import random as jax_random
from parity.build import build_experiment
from parity.config import ConfigError, load_config, registry
from parity.experiment import run_experiment
from tests._tiers import slow_except

AUGMENT = ("data.transform=[ToTensor, {name: RandomCrop, size: 8, padding: 1, padding_mode: reflect}, "
           "RandomHorizontalFlip, {name: Normalize, mean: [0.45], std: [0.25]}]")


def _uint8_hwc(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images as a user's loader returns them before ToTensor: uint8, (N, H, W, C)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 8, 8, 1), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int64)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_declared_transforms_give_both_loaders_the_same_batches(seed, num_workers):
    """uint8 HWC arrays through ToTensor, RandomCrop with padding, RandomHorizontalFlip and Normalize: each
    side's transforms draw torch's numbers from its own global generator, so after the same seed every
    batch of two epochs is bit-identical (the held-out set too, with its own eval_transform)."""
    cfg = load_config("lenet_digits", [AUGMENT, "data.eval_transform=[ToTensor]", f"train.seed={seed}",
                                       f"data.num_workers={num_workers}"])
    exp = build_experiment(cfg, train_data=_uint8_hwc(40, seed), val_data=_uint8_hwc(12, seed + 10))
    torch.manual_seed(seed)
    jax_random.manual_seed(seed)
    for _ in range(2):
        for (tx, ty), (jx, jy) in zip(exp.t_train, exp.j_train, strict=True):
            assert tx.dtype == torch.float32 and tx.shape[1:] == (1, 8, 8)
            np.testing.assert_array_equal(np.asarray(jx), tx.numpy())
            np.testing.assert_array_equal(np.asarray(jy), ty.numpy())
    (tx, _), (jx, _) = next(iter(exp.eval_loaders[0])), next(iter(exp.eval_loaders[1]))
    np.testing.assert_array_equal(np.asarray(jx), tx.numpy())
    assert float(tx.max()) <= 1.0  # ToTensor only: uint8 / 255


@pytest.mark.slow  # ~3 s: a 6-step run (the batches' equality above is the default tier's check)
def test_a_run_with_augmentation_passes_strictly_in_float64():
    """The same transforms in a float64 run: the runner keeps both generators in step (the probe and the
    compile's sample draw nothing from the run's stream). Measured max rel 2.2e-16 after 6 steps; bar 1e-10."""
    cfg = load_config("lenet_digits", [AUGMENT, "train.epochs=2", "train.dtype=float64",
                                       "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, train_data=_uint8_hwc(48, 0), val_data=_uint8_hwc(16, 1), write=False,
                            progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.config["data"]["transform"][1] == {"name": "RandomCrop", "size": 8, "padding": 1,
                                                     "pad_if_needed": False, "fill": 0, "padding_mode": "reflect"}


@pytest.mark.parametrize("override", ["model.init=copy", "model.init=seed"])
def test_model_init_copy_or_seed_starts_identical(override):
    """``model.init: seed``: the JAX model keeps its own init after jax_impl.random.manual_seed(train.seed),
    which draws torch's numbers (the MNIST net's Dropouts, built before fc1, draw nothing); the report's
    line says which init ran and that the two are identical."""
    cfg = load_config("mnist_example", ["model.kwargs={c1: 4, c2: 8, hidden: 16, image_size: 28}", override])
    exp = build_experiment(cfg)
    ours = _state(exp.jax_model)
    for name, value in exp.torch_model.state_dict().items():
        np.testing.assert_array_equal(ours[name], value.numpy())
    seeded = override.endswith("seed")
    expected = "own init after seed 1" if seeded else "copied into the JAX model"
    assert expected in exp.init and ("identical to torch's" in exp.init or not seeded)


def test_model_init_seed_reports_a_different_init():
    """With objects and ``model.init: seed`` the JAX model keeps the weights it was built with: drawn after
    another seed they differ, and the report's line names the worst tensor."""
    cfg = load_config("mnist_example", ["model.init=seed"])
    torch.manual_seed(0)
    torch_model = Net(c1=2, c2=4, hidden=8, image_size=12)
    jax_random.manual_seed(1)
    exp = build_experiment(cfg, torch_model=torch_model, jax_model=JaxNet(c1=2, c2=4, hidden=8, image_size=12),
                           train_data=(np.zeros((8, 1, 12, 12)), np.zeros(8, np.int64)))
    assert "different from torch's (max rel" in exp.init


def test_model_init_seed_names_mismatched_keys():
    cfg = load_config("mnist_example", ["model.init=seed"])
    with pytest.raises(ConfigError, match="missing keys"):
        build_experiment(cfg, torch_model=Net(c1=2, c2=4, hidden=8, image_size=12),
                         jax_model=JaxNet(c1=2, c2=4, hidden=8, image_size=12).fc1,
                         train_data=(np.zeros((8, 1, 12, 12)), np.zeros(8, np.int64)))


def _state(model) -> dict[str, np.ndarray]:
    from parity.convert.modules import module_state

    return {k: np.asarray(v[...]) for k, v in module_state(model).items()}




# SGD and Adam run three steps in the default tier, and the two optimizers torch refuses LeNet to (cheap); the other
# optimizers in the slow tier (the default tier's time budget: each compiles its own float64 steps).
@pytest.mark.parametrize("name", slow_except(registry.names("optimizer"), {"SGD", "Adam", "SparseAdam", "Muon"}))
def test_an_optimizer_named_alone_takes_torchs_defaults_on_both_sides(name):
    """``optimizer: {name: X}``, as torch users write ``X(model.parameters())``: every keyword left out takes
    torch's default on both sides. torch's optimizer holds exactly its class's defaults, every lr the report
    reads is that default, and three float64 steps on the same gradients give the same parameters
    (measured: bit-identical or within 2e-16; bar 1e-13)."""
    import jax
    import jax.numpy as jnp

    from parity.convert.modules import module_state
    from parity.numerics import strict_numerics

    cfg = load_config("lenet_digits", [f"optimizer={{name: {name}}}", "scheduler=null"])
    if name == "SparseAdam":  # torch's own refusal of a dense model's gradients, passed on as bad input
        with pytest.raises(ConfigError, match="SparseAdam does not support dense gradients"):
            build_experiment(cfg)
        return
    if name == "Muon":  # torch's own refusal of LeNet's 4-D conv weights, passed on as bad input
        with pytest.raises(ConfigError, match="Muon only supports 2D parameters"):
            build_experiment(cfg)
        return
    with strict_numerics(x64=True):
        exp = build_experiment(load_config("lenet_digits", [f"optimizer={{name: {name}}}", "scheduler=null",
                                                            "train.dtype=float64"]))
        reference = getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)])
        assert {k: v for k, v in exp.t_opt.param_groups[0].items() if k != "params"} == \
               {k: v for k, v in reference.param_groups[0].items() if k != "params"}
        assert exp.lrs.at(0, 0) == (reference.defaults["lr"],) and exp.lrs.at(99, 9) == (reference.defaults["lr"],)
        if name == "LBFGS":  # steps with a closure: tests/parity/test_runner_optimizers.py runs them against torch
            return
        params = {k: v[...] for k, v in module_state(exp.jax_model).items() if k in dict(exp.torch_model.named_parameters())}
        state = exp.tx.init(params)
        rng = np.random.default_rng(0)
        for _ in range(3):
            grads = {k: rng.standard_normal(p.shape) for k, p in exp.torch_model.named_parameters()}
            for k, p in exp.torch_model.named_parameters():
                p.grad = torch.from_numpy(grads[k])
            exp.t_opt.step()
            params, state = exp.tx.step({k: jnp.asarray(g) for k, g in grads.items()}, state, params)
        for k, p in exp.torch_model.named_parameters():
            np.testing.assert_allclose(np.asarray(jax.device_get(params[k])), p.detach().numpy(), rtol=1e-13,
                                       atol=1e-15, err_msg=k)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
@pytest.mark.parametrize("name", registry.names("scheduler"))
def test_a_scheduler_named_alone_builds_or_names_its_missing_argument(name):
    """``scheduler: {name: X}``: a scheduler whose arguments all have defaults builds with torch's, and its
    lrs match torch's scheduler over two epochs; one that needs an argument names it (a config error, never a
    crash)."""
    required = [p for p in registry.signature("scheduler", name).params.values() if p.required]
    if required:
        with pytest.raises(ConfigError, match=f"scheduler.{required[0].name}: missing required key"):
            load_config("lenet_digits", [f"scheduler={{name: {name}}}"])
        return
    exp = build_experiment(load_config("lenet_digits", [f"scheduler={{name: {name}}}"]))
    for epoch in range(3):
        assert exp.lrs.at(0, epoch)[0] == exp.t_opt.param_groups[0]["lr"], epoch
        exp.t_sched.step(*([1.0] if name == "ReduceLROnPlateau" else []))


def test_the_report_reads_every_groups_lr_from_the_built_optimizers():
    """Param groups covering every parameter: group 0 is the first listed group, and the report shows its lr
    (torch's ``param_groups[0]["lr"]``), with every group's beside it, as torch holds them."""
    cfg = load_config("lenet_digits", ["optimizer={name: SGD, lr: 0.5, param_groups: "
                                       "[{params: '*.weight', lr: 0.01}, {params: '*.bias', lr: 0.02}]}",
                                       "scheduler={name: StepLR, step_size: 1, gamma: 0.5}", "train.epochs=2"])
    report = run_experiment(cfg, max_steps=3, write=False, progress=False, only="torch")
    assert [g["lr"] for g in build_experiment(cfg).t_opt.param_groups] == [0.01, 0.02]
    assert report.steps[0]["lr"] == 0.01 and report.steps[0]["lrs"] == [0.01, 0.02]
    assert report.epochs[0].lr == 0.01 and report.epochs[0].lrs == [0.01, 0.02]


def _jax_counterpart(section: str, name: str):
    """jax_impl's callable for a torch class a config may name, or ``None`` where jax_impl has none."""
    import jax_impl.nn as jnn
    from parity.lr_scheduler import jax_schedule_factory
    from parity.optim import jax_optimizer_factory

    try:
        if section == "optimizer":
            return jax_optimizer_factory(name)
        if section == "scheduler":
            return jax_schedule_factory(name)
        return getattr(jnn, name).__init__
    except (NotImplementedError, AttributeError):
        return None


@pytest.mark.parametrize("section", ["optimizer", "scheduler", "loss"])
def test_every_key_left_out_takes_torchs_default_on_both_sides(section):
    """A key a config leaves out is not passed to either side, so each side's own default must be torch's:
    every keyword default of jax_impl's optimizers, schedules and losses equals the torch class's (read from
    torch's signature through the config registry). torch's execution-path flags (foreach, fused,
    capturable, differentiable) are refused by jax_impl when set, and ``last_epoch`` is refused unless -1."""
    import inspect

    path_flags = {"foreach", "fused", "capturable", "differentiable", "last_epoch"}
    checked = 0
    for name in registry.names(section):
        counterpart = _jax_counterpart(section, name)
        if counterpart is None or name == "ReduceLROnPlateau":  # its keywords: test_plateau, against torch
            continue
        params = inspect.signature(counterpart).parameters.values()
        if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            continue  # refusals that take nothing: they have no keywords to compare
        ours = {p.name: p.default for p in params}
        for key, param in registry.signature(section, name).params.items():
            if param.required or key in path_flags:
                continue
            assert key in ours, f"{section} {name}: jax_impl has no {key!r}"
            assert ours[key] == param.default, f"{section} {name}.{key}: jax_impl {ours[key]!r}, torch {param.default!r}"
            checked += 1
    assert checked >= {"optimizer": 60, "scheduler": 20, "loss": 15}[section], checked
