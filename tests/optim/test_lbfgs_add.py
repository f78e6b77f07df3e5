"""jax_impl.optim.lbfgs_add.torch_add against torch's CPU ``x.add(y, alpha=a)``, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jax_impl.optim import lbfgs_add
from jax_impl.optim.lbfgs_add import MIN_COMPILED_SIZE, torch_add


def _torch_add(x: np.ndarray, alpha, y: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).add(torch.from_numpy(y), alpha=float(alpha)).numpy()


def _vectors(rng: np.random.Generator, n: int, dtype, kind: str) -> tuple[np.ndarray, float, np.ndarray]:
    finfo = np.finfo(dtype)
    y = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(dtype)
    alpha = float(dtype(rng.standard_normal() * 2.0 ** rng.integers(-8, 8)))
    # Sums that cancel, so the product's rounding decides most of them: where FMA and mul-then-add differ.
    x = (-y * dtype(alpha) * (1 + rng.standard_normal(n) * 1e-6)).astype(dtype)
    x[: n // 3] = rng.standard_normal(n // 3).astype(dtype)
    if kind == "zeros":  # signed zeros in both operands, and exact cancellations
        x[::7], y[::7] = -0.0, 0.0
        x[1::11] = (-(y[1::11].astype(np.float64) * alpha)).astype(dtype)
    elif kind == "subnormal operand":
        y[n // 2] = finfo.smallest_subnormal * 5
    elif kind == "subnormal result":
        x[n // 2], y[n // 2], alpha = finfo.tiny, -finfo.tiny * dtype(0.75), 1.0
    elif kind == "tiny alpha":
        alpha = float(finfo.smallest_subnormal * 3)
    elif kind == "special":
        k = min(n, 6)
        x[:k] = [np.inf, -np.inf, np.nan, finfo.max, -finfo.max, 1][:k]
        y[:k] = [1, np.inf, 2, finfo.max, 1, np.nan][:k]
    return x, alpha, y


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["plain", "zeros", "subnormal operand", "subnormal result", "tiny alpha", "special"])
@pytest.mark.parametrize("n", [1, 37, MIN_COMPILED_SIZE - 1, MIN_COMPILED_SIZE, 10007])
def test_torch_add_is_torchs_add_with_alpha(dtype, kind, n):
    rng = np.random.default_rng([n, len(kind), np.dtype(dtype).itemsize])
    x, alpha, y = _vectors(rng, n, dtype, kind)
    ours = torch_add(x, alpha, y)
    expected = _torch_add(x, alpha, y)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    # Bits, NaNs as NaNs (their payloads are the hardware's on both sides).
    same = (ours.view(np.uint8).reshape(n, -1) == expected.view(np.uint8).reshape(n, -1)).all(axis=1)
    np.testing.assert_array_equal(same | (np.isnan(ours) & np.isnan(expected)), True)


def test_long_float64_vectors_take_the_compiled_route_and_denormals_the_exact_one(monkeypatch):
    if lbfgs_add._compiled() is None:
        pytest.skip("XLA's CPU add is not a fused multiply-add here: the emulation runs every add")
    emulated = []
    original = lbfgs_add._emulated
    monkeypatch.setattr(lbfgs_add, "_emulated", lambda *a: emulated.append(a) or original(*a))
    rng = np.random.default_rng(0)
    x, alpha, y = _vectors(rng, 4096, np.float64, "plain")
    np.testing.assert_array_equal(torch_add(x, alpha, y), _torch_add(x, alpha, y))
    assert not emulated
    for kind in ("subnormal operand", "subnormal result", "tiny alpha"):
        x, alpha, y = _vectors(rng, 4096, np.float64, kind)
        np.testing.assert_array_equal(torch_add(x, alpha, y), _torch_add(x, alpha, y))
    assert len(emulated) == 3  # each redone exactly: XLA's CPU flushes denormals, torch does not


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_results_are_writable_arrays_of_their_own(dtype):
    x = np.random.default_rng(1).standard_normal(MIN_COMPILED_SIZE * 2).astype(dtype)
    result = torch_add(x, 0.5, x)
    assert result.flags.writeable and result.flags.owndata and result.dtype == dtype
