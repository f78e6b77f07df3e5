"""``parity run`` with LBFGS (closure steps), Muon, Adafactor, SparseAdam and ``train.ema``, against real torch."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

import jax_impl.nn as jnn
from parity.cli import main
from parity.config import ConfigError, load_config
from parity.experiment import run_experiment

# float64, no held-out split, no scheduler; each test adds its optimizer.
BASE = ["train.dtype=float64", "data.val_fraction=0", "scheduler=null", "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"]


def _data() -> tuple[np.ndarray, np.ndarray]:
    """56 samples of 8 features, labels from a noisy linear rule (learnable, so LBFGS converges smoothly)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((56, 8))
    return x, np.argmax(x @ rng.standard_normal((8, 3)) + 0.5 * rng.standard_normal((56, 3)), 1)


def _pair(bias: bool = True) -> tuple[torch.nn.Module, jnn.Module]:
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=bias), torch.nn.Tanh(), torch.nn.Linear(16, 3, bias=bias))
    return t, jnn.Sequential(jnn.Linear(8, 16, bias=bias), jnn.Tanh(), jnn.Linear(16, 3, bias=bias))


def _run(overrides: list[str], bias: bool = True, **kwargs):
    cfg = load_config("lenet_digits", [*BASE, *overrides])
    t, j = _pair(bias)
    start = copy.deepcopy(t).double()
    report = run_experiment(cfg, torch_model=t, jax_model=j, train_data=_data(), write=False, progress=False, **kwargs)
    return report, start, t


def test_lbfgs_run_steps_with_closures_on_both_sides_float64():
    """Full-batch LBFGS (max_iter 10: up to 10 closure calls a step), 2 steps: the JAX side within rtol
    1e-10 of torch (measured 4.6e-14; LBFGS's iterations amplify the gradients' rounding differences
    step by step), and the runner's torch side bit-identical to torch's closure recipe written out."""
    report, start, t = _run(["optimizer={name: LBFGS, max_iter: 10}", "data.batch_size=56", "data.shuffle=false",
                             "train.epochs=2"])
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert len(report.steps) == 2
    x, y = (torch.from_numpy(a) for a in _data())
    opt = torch.optim.LBFGS(start.parameters(), max_iter=10)
    losses = []
    for _ in range(2):
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(start(x), y)
            loss.backward()
            return loss
        losses.append(opt.step(closure).item())
    assert [s["torch_loss"] for s in report.steps] == losses
    for (name, got), ref in zip(t.named_parameters(), start.parameters(), strict=True):
        assert torch.equal(got, ref), name


@pytest.mark.slow
def test_lbfgs_strong_wolfe_with_ema_float64():
    """strong-Wolfe line search, full batch, 2 epochs, with train.ema: parameters and averaged weights
    within 1e-10 of torch (measured 6.3e-13 for the parameters)."""
    report, _, _ = _run(["optimizer={name: LBFGS, max_iter: 10, line_search_fn: strong_wolfe}", "data.batch_size=56",
                         "train.epochs=2", "train.ema={decay: 0.5}"])
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.epochs[-1].ema_max_rel <= 1e-10


def test_ema_weights_agree_with_torchs_averaged_model_float64():
    """Adam with train.ema (decay 0.9, updated after each of 7 steps): torch's AveragedModel and
    jax_impl.optim.swa_utils' average within 1e-12 (measured 1.5e-16; the lerp rounds as torch's), reported
    per epoch beside the parameters."""
    report, _, _ = _run(["optimizer={name: Adam, lr: 0.01}", "data.batch_size=8", "train.epochs=1",
                             "train.ema={decay: 0.9}"])
    assert report.passed, report.message
    assert 0 <= report.epochs[-1].ema_max_rel <= 1e-12 and report.epochs[-1].ema_worst_leaf is not None
    from parity.report import render_markdown

    assert "EMA max rel" in render_markdown(report)


def test_muon_needs_2d_parameters():
    """Muon on a model with biases is torch's own error, as a config error, before anything runs."""
    with pytest.raises(ConfigError, match="Muon only supports 2D parameters"):
        _run(["optimizer={name: Muon, lr: 0.02}", "data.batch_size=8", "train.epochs=1"])


@pytest.mark.slow
def test_muon_runs_on_weight_matrices():
    """Muon on a bias-free model, float64, 7 steps (measured 0: bit-identical)."""
    report, _, _ = _run(["optimizer={name: Muon, lr: 0.02}", "data.batch_size=8", "train.epochs=1"], bias=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message


@pytest.mark.slow
def test_adafactor_runs():
    """Adafactor (factored and unfactored moments), float64, 7 steps: measured 1.6e-16."""
    report, _, _ = _run(["optimizer={name: Adafactor}", "data.batch_size=8", "train.epochs=1"])
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message


def test_sparse_adam_on_dense_gradients_is_torchs_error(tmp_path, capsys):
    """A model without sparse embeddings gives dense gradients: torch's SparseAdam error, before anything runs
    (the CLI: one line, exit 2)."""
    with pytest.raises(ConfigError, match="SparseAdam does not support dense gradients"):
        _run(["optimizer={name: SparseAdam}", "data.batch_size=8"])
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path), "optimizer={name: SparseAdam}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SparseAdam does not support dense gradients" in err[0]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("override", "path"), [
    ("train.accumulate=2", "train.accumulate"),
    ("train.clip_grad_norm=1.0", "train.clip_grad_norm"),
    ("scheduler={name: StepLR, step_size: 1}", "scheduler"),
])
def test_lbfgs_refuses_what_a_closure_step_cannot_do(override, path):
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        load_config("lenet_digits", ["optimizer={name: LBFGS}", "scheduler=null", override])


def test_ema_config_is_validated_and_omitted_at_default():
    assert "ema" not in load_config("lenet_digits").to_dict()["train"]
    assert load_config("lenet_digits", ["train.ema={decay: 0.99}"]).to_dict()["train"]["ema"] == {"decay": 0.99}
    with pytest.raises(ConfigError, match="decay"):
        load_config("lenet_digits", ["train.ema={decay: 1.5}"])
    with pytest.raises(ConfigError, match="ema"):
        load_config("lenet_digits_ddp", ["train.ema={decay: 0.9}"])


@pytest.mark.slow
def test_lbfgs_checkpoint_resumes_on_the_uninterrupted_trajectory(tmp_path):
    """A run stopped after its first epoch and resumed from checkpoint.pt (each side's LBFGS state through
    parity.convert) takes the uninterrupted run's steps: the same losses, bit for bit, on both sides."""
    over = ["optimizer={name: LBFGS, max_iter: 5}", "data.batch_size=56", "data.shuffle=false", "train.epochs=2"]
    full, _, _ = _run(over)
    cfg = load_config("lenet_digits", [*BASE, *over])
    t, j = _pair()
    first = run_experiment(cfg, torch_model=t, jax_model=j, train_data=_data(), runs_dir=tmp_path, progress=False,
                           max_steps=1)
    t, j = _pair()
    resumed = run_experiment(cfg, torch_model=t, jax_model=j, train_data=_data(), runs_dir=tmp_path,
                             progress=False, resume=Path(first.run_dir) / "checkpoint.pt")
    for side in ("torch_loss", "jax_loss"):
        assert [s[side] for s in resumed.steps] == [s[side] for s in full.steps], side
    assert resumed.epochs[-1].param_max_rel == full.epochs[-1].param_max_rel


@pytest.mark.slow
def test_lbfgs_closure_draws_dropout_masks_per_evaluation_float64():
    """With Dropout, every closure evaluation draws new masks from the global generators on both sides, in
    the same order: 2 steps of up to 5 iterations on 28-sample batches, within 1e-10 (measured 9.4e-16)."""
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    j = jnn.Sequential(jnn.Linear(8, 16), jnn.Dropout(0.2), jnn.Tanh(), jnn.Linear(16, 3))
    cfg = load_config("lenet_digits", [*BASE, "optimizer={name: LBFGS, max_iter: 5}", "data.batch_size=28",
                                       "train.epochs=1"])
    report = run_experiment(cfg, torch_model=t, jax_model=j, train_data=_data(), write=False, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
