"""The verdict against torch's own float32 floor: torch trained again in float64 beside a float32 run."""

from __future__ import annotations

import math

import pytest

from parity.config import load_config
from parity.experiment import run_experiment
from parity.floor import FLOOR_FACTOR, torch_precision_floor

# 23 steps; Adam at 4x the config's lr takes float32's rounding past rtol 1e-4 within them (at the config's lr
# 0.005 only between steps 40 and 46).
CHAOTIC = ["data.batch_size=64", "train.epochs=1", "optimizer.lr=0.02"]


@pytest.mark.slow  # ~7 s; the default tier judges a float32 run by the floor in tests/parity/test_run_recordings.py
def test_chaotic_float32_run_passes_by_the_floor_torch_itself_sets():
    """LeNet/Adam on batches of 64 at lr 0.02, one epoch: JAX ends 7.0e-4 from torch (beyond rtol 1e-4), torch's
    float32 run ends 9.1e-4 from torch's float64 run (fc1.weight; largest ratio 1.4); the floor is the same
    number torch_precision_floor measures alone."""
    cfg = load_config("lenet_digits", CHAOTIC)
    report = run_experiment(cfg, write=False, progress=False)
    last = report.epochs[-1]
    assert last.param_max_rel > cfg.train.tolerance.rtol
    assert report.passed and report.passed_by == "floor"
    assert last.param_max_rel <= FLOOR_FACTOR * last.floor_max_rel
    assert report.verdict().startswith("PASSED by torch's float32 floor: parameters max rel ")
    alone = torch_precision_floor(cfg, 23)
    assert (last.floor_max_rel, last.floor_worst) == (alone["max_rel"], alone["worst"])
    assert all("torch_f64_loss" in s for s in report.steps)


@pytest.mark.slow  # test_runner's nudged-bias run fails with the floor on in the default tier
def test_a_porting_bug_fails_whatever_the_floor(monkeypatch):
    """fc3's bias nudged after conversion: 5 steps in, JAX is far beyond 5x a floor of ~1e-7."""
    import parity.models as PM

    real = PM.build_models

    def nudged(*args, **kwargs):
        t, j = real(*args, **kwargs)
        j.fc3.bias[...] = j.fc3.bias[...].at[0].add(0.5)
        return t, j

    monkeypatch.setattr(PM, "build_models", nudged)
    report = run_experiment(load_config("lenet_digits"), max_steps=5, write=False, progress=False)
    assert not report.passed and report.passed_by == "tolerance"
    assert "beyond rtol 0.0001 and beyond 5x torch's own float32 floor" in report.message


@pytest.mark.slow  # two short runs
def test_float64_runs_stay_strict_and_the_floor_can_be_off():
    f64 = run_experiment(load_config("lenet_digits", ["train.dtype=float64"]), max_steps=5, write=False,
                         progress=False)
    off = run_experiment(load_config("lenet_digits", ["train.floor=false"]), max_steps=5, write=False,
                         progress=False)
    for report in (f64, off):
        assert report.passed and report.passed_by == "tolerance" and math.isnan(report.epochs[-1].floor_max_rel)
