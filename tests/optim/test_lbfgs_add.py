"""jax_impl.optim.lbfgs_add.torch_add against torch's CPU ``x.add(y, alpha=a)``, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jax_impl.optim import lbfgs_add
from jax_impl.optim.lbfgs_add import BLAS_PART, MIN_COMPILED_SIZE, torch_add

_SIZES = [1, 37, 63, 64, 65, MIN_COMPILED_SIZE - 1, MIN_COMPILED_SIZE, BLAS_PART + 1, 10007, 3 * BLAS_PART + 17]


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
    elif kind == "zero alpha":  # torch still adds 0 * y: NaN for an infinite y, +0.0 for x = -0.0
        alpha = -0.0
        k = min(n, 2)
        x[:k], y[:k] = [-0.0, 1.0][:k], [1.0, np.inf][:k]
    elif kind == "special":
        k = min(n, 6)
        x[:k] = [np.inf, -np.inf, np.nan, finfo.max, -finfo.max, 1][:k]
        y[:k] = [1, np.inf, 2, finfo.max, 1, np.nan][:k]
    return x, alpha, y


@pytest.mark.parametrize("route", ["first", "without BLAS"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["plain", "zeros", "subnormal operand", "subnormal result", "tiny alpha", "zero alpha",
                                  "special"])
@pytest.mark.parametrize("n", _SIZES)
def test_torch_add_is_torchs_add_with_alpha(monkeypatch, route, dtype, kind, n):
    """Every route, on sizes around its parts' edges (BLAS's padded tail and its 8192-element parts, XLA's
    threshold)."""
    if route == "without BLAS":
        monkeypatch.setattr(lbfgs_add, "_blas", lambda char: None)
    rng = np.random.default_rng([n, len(kind), np.dtype(dtype).itemsize])
    x, alpha, y = _vectors(rng, n, dtype, kind)
    ours = torch_add(x, alpha, y)
    expected = _torch_add(x, alpha, y)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    # Bits, NaNs as NaNs (their payloads are the hardware's on both sides).
    same = (ours.view(np.uint8).reshape(n, -1) == expected.view(np.uint8).reshape(n, -1)).all(axis=1)
    np.testing.assert_array_equal(same | (np.isnan(ours) & np.isnan(expected)), True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blas_route_takes_every_nonzero_alpha(monkeypatch, dtype):
    if lbfgs_add._blas(np.dtype(dtype).char) is None:
        pytest.skip("this BLAS's axpy does not give torch's fused multiply-adds: another route runs")
    other = []
    original = lbfgs_add._emulated
    monkeypatch.setattr(lbfgs_add, "_emulated", lambda *a: other.append(a) or original(*a))
    rng = np.random.default_rng(0)
    for kind in ("plain", "subnormal operand", "subnormal result", "tiny alpha", "special"):
        x, alpha, y = _vectors(rng, 3 * BLAS_PART + 17, dtype, kind)
        np.testing.assert_array_equal(torch_add(x, alpha, y), _torch_add(x, alpha, y))
    assert not other  # subnormals too: the calling thread does not flush them
    x, alpha, y = _vectors(rng, 100, dtype, "zero alpha")
    np.testing.assert_array_equal(torch_add(x, alpha, y), _torch_add(x, alpha, y))
    assert len(other) == 1  # a zero alpha is the emulation's: BLAS would skip the add


def test_without_blas_long_float64_vectors_take_the_compiled_route_and_denormals_the_exact_one(monkeypatch):
    monkeypatch.setattr(lbfgs_add, "_blas", lambda char: None)
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


def test_another_blas_than_openblas_is_not_used(monkeypatch):
    """The parts rest on OpenBLAS's single-thread rule (at most 10,000 elements); another BLAS is not trusted."""
    import scipy

    config = {"Build Dependencies": {"blas": {"name": "mkl-sdl"}}}
    monkeypatch.setattr(scipy, "show_config", lambda mode=None: config)
    assert lbfgs_add._blas.__wrapped__("d") is None


@pytest.mark.parametrize(("x", "y", "error"), [
    (np.zeros(4, np.float32), np.zeros(4, np.float64), TypeError),
    (np.zeros(4, np.float16), np.zeros(4, np.float16), TypeError),
    (np.zeros(4), np.zeros(5), ValueError),
    (np.zeros((2, 4)), np.zeros((2, 4)), ValueError),
])
def test_vectors_of_another_kind_are_refused(x, y, error):
    with pytest.raises(error, match="torch_add adds"):
        torch_add(x, 0.5, y)
