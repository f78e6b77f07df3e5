"""``fused=True`` (``jax_impl.optim.fused``) against torch's fused CPU kernels: Adam, AdamW, SGD, Adagrad.

torch's fused kernels round a parameter's last ``numel % lanes`` elements
(its scalar loop) differently from the rest, so every problem here has leaves
that end in a register-loop remainder: ``(3, 13)`` (39 elements: float32 16+16
and 7 scalar; float64 4x8, a 256-bit copy of 4 and 3 scalar with AVX-512),
``(29,)`` (float32 16, 8 in the 256-bit copy, 5 scalar), a 0-d leaf (one scalar
element) and, in the slow tier, ``(41, 25)`` (1025 elements, split across
torch's threads in cache lines). The bar is bit identity in float32 and
float64, parameters and state: the fused kernels' sqrt is IEEE on every CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from jax_impl.optim import fused
from tests.optim import _harness as H

SHAPES = {"w": (3, 13), "b": (29,), "s": ()}
SLOW_SHAPES = {**SHAPES, "big": (41, 25)}


def assert_bit_identical(traj: H.Trajectory, label: str) -> None:
    """Parameters and every state buffer equal torch's bit for bit."""
    report = H.compare(traj.torch_params, traj.jax_params)
    assert report.passed and report.max_ulp == 0, f"{label}: parameters differ from torch:\n{report.table()}"
    H.assert_state_matches(traj)


def run_fused(name: str, kwargs: dict[str, Any], dtype: str, steps: int, seed: int, shapes=SHAPES) -> H.Trajectory:
    arrays = H.make_problem(H.Problem(seed=seed, shapes=shapes, steps=steps, zero_fraction=0.05), dtype)
    return H.run_both(name, {**kwargs, "fused": True}, arrays)


# --------------------------------------------------------------------------- seeded grids


def draw_config(name: str, rng: np.random.Generator) -> dict[str, Any]:
    """One seeded configuration of ``name``'s options (0 and the non-default branches both drawn)."""

    def log_uniform(lo: float, hi: float) -> float:
        return float(10.0 ** rng.uniform(np.log10(lo), np.log10(hi)))

    def zero_or(lo: float, hi: float) -> float:
        return 0.0 if rng.random() < 0.3 else log_uniform(lo, hi)

    maximize = bool(rng.random() < 0.5)
    if name in ("adam", "adamw"):
        beta1 = float(rng.choice([0.0, 0.3, 0.6, 0.9]))  # lerp weights on both sides of 0.5
        beta2 = float(rng.choice([0.9, 0.99, 0.999]))
        kwargs = dict(lr=log_uniform(1e-4, 0.1), betas=(beta1, beta2), eps=float(rng.choice([1e-8, 1e-6, 1e-3])),
                      weight_decay=zero_or(1e-4, 0.1), amsgrad=bool(rng.random() < 0.5), maximize=maximize,
                      capturable=bool(rng.random() < 0.25))
        if name == "adam":
            kwargs["decoupled_weight_decay"] = bool(rng.random() < 0.3)
        return kwargs
    if name == "sgd":
        momentum = float(rng.choice([0.0, 0.5, 0.9]))
        nesterov = momentum > 0 and bool(rng.random() < 0.5)
        dampening = 0.0 if nesterov or rng.random() < 0.5 else float(rng.choice([0.1, 0.5]))
        return dict(lr=log_uniform(1e-3, 0.1), momentum=momentum, dampening=dampening,
                    weight_decay=zero_or(1e-4, 0.1), nesterov=nesterov, maximize=maximize)
    if name == "adagrad":
        return dict(lr=log_uniform(1e-3, 0.1), lr_decay=zero_or(1e-4, 1e-2), weight_decay=zero_or(1e-4, 0.1),
                    initial_accumulator_value=float(rng.choice([0.0, 0.1])), eps=float(rng.choice([1e-10, 1e-6])),
                    maximize=maximize)
    raise KeyError(name)


NAMES = ("adam", "adamw", "sgd", "adagrad")

# The default tier: one config per optimizer with its non-default branches on, 10 steps. AdamW's
# 1 - lr * weight_decay and Adagrad's 1 + 6 * lr_decay (step 7) round differently as the kernel's
# float64 FMA than as Python's product and sum (test_host_scalar_fmas_matter).
SHORT = [
    ("adam", dict(lr=1e-2, betas=(0.8, 0.99), amsgrad=True, weight_decay=1e-2, maximize=True), "float32"),
    ("adamw", dict(lr=0.03, betas=(0.3, 0.999), weight_decay=0.037), "float64"),
    ("sgd", dict(lr=0.02, momentum=0.9, nesterov=True, weight_decay=1e-3), "float32"),
    ("adagrad", dict(lr=0.05, lr_decay=0.0099, initial_accumulator_value=0.1, weight_decay=1e-3), "float64"),
]


def test_host_scalar_fmas_matter():
    """The SHORT configs reach host scalars where the kernel's float64 FMA and Python's arithmetic differ."""
    from jax_impl.random.fma import fma64

    assert float(fma64(np.float64(-0.03), np.float64(0.037), np.float64(1.0))) != 1 - 0.03 * 0.037
    assert float(fma64(np.float64(6.0), np.float64(0.0099), np.float64(1.0))) != 1.0 + 6.0 * 0.0099


@pytest.mark.parametrize(("name", "kwargs", "dtype"), SHORT, ids=[f"{n}-{d}" for n, _, d in SHORT])
def test_fused_matches_torch_short(name, kwargs, dtype):
    assert_bit_identical(run_fused(name, kwargs, dtype, steps=10, seed=3), f"{name} {kwargs}")


@pytest.mark.slow  # 2 configs x 100 steps per optimizer and dtype, ~2 s each (one compile per config)
@pytest.mark.parametrize("dtype", H.DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_fused_grid_100_steps(name, dtype):
    rng = np.random.default_rng([NAMES.index(name), H.DTYPES.index(dtype)])
    for i in range(2):
        kwargs = draw_config(name, rng)
        traj = run_fused(name, kwargs, dtype, steps=100, seed=i, shapes=SLOW_SHAPES)
        assert_bit_identical(traj, f"{name} {dtype} {kwargs}")


# --------------------------------------------------------------------------- fused vs single-tensor


def run_pair(name: str, kwargs: dict[str, Any], dtype: str, shapes: dict, steps: int = 20):
    """torch and ours, fused and single-tensor, from the same problem."""
    arrays = H.make_problem(H.Problem(seed=7, shapes=shapes, steps=steps), dtype)
    return H.run_both(name, {**kwargs, "fused": True}, arrays), H.run_both(name, kwargs, arrays)


def test_sgd_fused_tail_differs_from_single_tensor_and_each_is_followed():
    """Momentum with dampening 0: the fused scalar loop computes ``fma(b, μ, g)``, one rounding where the
    single-tensor ``b.mul_(μ).add_(g)`` has two; the register loop rounds as the single-tensor path."""
    shapes = {"body": (32,), "tail": (7,)}  # float32: two registers; a scalar loop only (any x86 capability)
    fused_traj, single_traj = run_pair("sgd", dict(lr=0.05, momentum=0.9), "float32", shapes)
    assert_bit_identical(fused_traj, "fused")
    assert_bit_identical(single_traj, "single-tensor")
    assert H.bitwise_equal({"b": fused_traj.torch_params["body"]}, {"b": single_traj.torch_params["body"]})
    if fused.torch_cpu_capability() != "default":
        assert not H.bitwise_equal({"t": fused_traj.torch_params["tail"]}, {"t": single_traj.torch_params["tail"]})


@pytest.mark.slow  # ~6 s: four runs with compiles
@pytest.mark.parametrize("dtype", H.DTYPES)
def test_adam_fused_differs_from_single_tensor_and_each_is_followed(dtype):
    """Adam's second moment in the scalar tail (``fma(v, β2, (1-β2)g·g)``) and the IEEE sqrt (torch's
    single-tensor sqrt is MKL's on x86) make torch's fused and single-tensor runs differ; ours follows each."""
    shapes = {"w": (3, 13), "s": ()}
    kwargs = dict(lr=1e-2, betas=(0.9, 0.99), amsgrad=True)
    fused_traj, single_traj = run_pair("adam", kwargs, dtype, shapes, steps=50)
    assert_bit_identical(fused_traj, "fused")
    H.assert_matches_torch("adam", single_traj, dtype)
    if fused.torch_cpu_capability() != "default":
        assert not H.bitwise_equal(fused_traj.torch_params, single_traj.torch_params)


# --------------------------------------------------------------------------- flags, capability


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("flags", [dict(differentiable=True), dict(foreach=True), dict(foreach=True, differentiable=True)])
def test_fused_flag_conflicts_raise_like_torch(name, flags):
    with pytest.raises(RuntimeError) as theirs:
        H.torch_class(name)([torch.nn.Parameter(torch.zeros(2))], fused=True, **flags)
    with pytest.raises(RuntimeError) as ours:
        H.build(name, dict(fused=True, **flags))
    assert str(ours.value) == str(theirs.value)


def test_capability_is_torchs():
    assert fused.torch_cpu_capability() == torch.backends.cpu.get_cpu_capability().lower()


@pytest.mark.parametrize(
    ("numel", "itemsize", "capability", "tail"),
    [(39, 4, "avx512", 7), (29, 4, "avx512", 5), (24, 4, "avx512", 0), (16, 4, "avx512", 0),
     (39, 8, "avx512", 3), (29, 8, "avx512", 1), (1, 8, "avx512", 1),
     (39, 4, "avx2", 7), (29, 4, "avx2", 5), (39, 8, "avx2", 3), (7, 4, "default", 0)],
)
def test_scalar_tail_size(numel, itemsize, capability, tail):
    assert fused.scalar_tail_size(numel, itemsize, capability) == tail


def test_half_precision_is_refused():
    import jax.numpy as jnp

    tx = fused.fused_sgd(lr=0.1)
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    with pytest.raises(NotImplementedError, match="bfloat16"):
        tx.step(params, tx.init(params), params)


def short_grid() -> None:
    """The default-tier configs, run under a forced capability (outside pytest: the tables as conftest cuts them)."""
    with H.short_scalar_tables():
        for name, kwargs, dtype in SHORT:
            assert_bit_identical(run_fused(name, kwargs, dtype, steps=10, seed=3), f"{name} {kwargs}")


@pytest.mark.slow  # ~10 s each: a fresh interpreter importing torch and jax, 4 runs
@pytest.mark.parametrize("capability", ["avx2", "default"])
def test_fused_matches_torch_under_forced_capability(capability):
    """``ATEN_CPU_CAPABILITY`` switches torch's kernels (AVX2: no 256-bit remainder copy; default: no FMA);
    both sides read it."""
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT" and capability == "avx2":
        pytest.skip("this CPU has no AVX2 kernels")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(root)}
    code = "from tests.optim.test_fused import short_grid; short_grid(); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:] + out.stderr[-3000:]
