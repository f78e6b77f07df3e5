"""``jax_impl.optim.sparseadam`` against ``torch.optim.SparseAdam`` on ``nn.Embedding(sparse=True)`` gradients."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl.optim import sparse_adam as SA
from jax_impl.optim import sparseadam
from parity import strict_numerics
from parity.numerics import sqrt_tolerances

N, D = 12, 5


def _batches(steps: int, batch: int, seed: int, empty_at: int | None = None):
    """Index batches with repeats (few rows, so most rows repeat) and seeded output gradients."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(steps):
        size = 0 if k == empty_at else batch
        idx = rng.integers(0, N // 2 if k % 3 else N, size=(size,))
        out.append((idx, rng.standard_normal((size, D)) * 10.0 ** rng.integers(-2, 2)))
    return out


def _run(dtype: str, batches, kwargs: dict, feed: str = "raw", padding_idx: int | None = None):
    """torch's Embedding + SparseAdam and ours on the same batches; ``feed``: "raw" (uncoalesced) or torch's
    coalesced gradient."""
    tdtype = getattr(torch, dtype)
    emb = torch.nn.Embedding(N, D, sparse=True, padding_idx=padding_idx, dtype=tdtype)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(np.random.default_rng(7).standard_normal((N, D))))
    opt = torch.optim.SparseAdam(emb.parameters(), **kwargs)
    tx = sparseadam(**kwargs)
    params = {"weight": jnp.asarray(emb.weight.detach().numpy())}
    state = tx.init(params)
    step = tx.step  # eager: the host scalars per step (a jit would tabulate them until the betas converge)
    for idx, g_out in batches:
        opt.zero_grad()
        out = emb(torch.from_numpy(idx))
        out.backward(torch.from_numpy(g_out.astype(dtype)))
        if feed == "coalesced":
            coalesced = emb.weight.grad.coalesce()
            grad = SA.SparseGrad(jnp.asarray(coalesced.indices().numpy()), jnp.asarray(coalesced.values().numpy()))
        else:
            grad = SA.embedding_sparse_grad(jnp.asarray(idx), jnp.asarray(g_out.astype(dtype)), N, padding_idx)
        opt.step()
        params, state = step({"weight": grad}, state, params)
    torch_state = opt.state[emb.weight]
    return (emb.weight.detach().numpy(), torch_state["exp_avg"].numpy(), torch_state["exp_avg_sq"].numpy(),
            torch_state["step"]), (np.asarray(params["weight"]), np.asarray(state.exp_avg["weight"]),
                                   np.asarray(state.exp_avg_sq["weight"]), int(state.count))


def _assert_close(theirs, mine, dtype: str) -> None:
    tol = sqrt_tolerances(dtype)  # {} (bit for bit) where jax_impl reproduces this machine's torch sqrt
    assert mine[3] == theirs[3]
    for name, a, b in zip(("weight", "exp_avg", "exp_avg_sq"), mine[:3], theirs[:3]):
        if tol:
            np.testing.assert_allclose(a, b, rtol=tol["rtol"], atol=tol["atol"], err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


KWARGS = [
    {},
    {"lr": 0.05, "betas": (0.5, 0.9), "eps": 1e-6},
    {"lr": 0.01, "betas": (0.0, 0.99), "maximize": True},
]


@pytest.mark.parametrize("kwargs,dtype,steps", [
    (KWARGS[1], "float32", 15),
    (KWARGS[2], "float64", 15),
    *[pytest.param(k, d, 50, marks=pytest.mark.slow) for k in KWARGS for d in ("float32", "float64")],
])
def test_bit_identical_up_to_16_entries(kwargs, dtype, steps):
    """Steps of 16 looked-up indices (repeats in every batch, one empty batch): torch's coalesce keeps
    the given order up to 16 entries, so every weight and moment equals torch's bit for bit."""
    with strict_numerics(0, x64=True):
        theirs, mine = _run(dtype, _batches(steps, 16, seed=len(kwargs), empty_at=7), kwargs)
        _assert_close(theirs, mine, dtype)


@pytest.mark.parametrize("dtype,steps", [("float32", 15), pytest.param("float32", 50, marks=pytest.mark.slow),
                                         pytest.param("float64", 50, marks=pytest.mark.slow)])
def test_bit_identical_given_torch_coalesced_gradient(dtype, steps):
    """Batches of 40 with many repeats, fed as torch's coalesced gradient: bit for bit."""
    with strict_numerics(0, x64=True):
        theirs, mine = _run(dtype, _batches(steps, 40, seed=3), {"lr": 0.02}, feed="coalesced")
        _assert_close(theirs, mine, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_large_batches_raw_gradient(dtype):
    """Batches of 40 fed raw: duplicates summed in the given order, torch's in its unstable sort's order.

    Measured after 50 steps, largest elementwise relative difference (weight, exp_avg, exp_avg_sq):
    float32 5.3e-7, 6.0e-6 (an exp_avg entry near zero), 1.9e-7; float64 6.2e-16, 1.1e-14, 5.9e-16.
    The summation order of three or more duplicates rounds the coalesced float32 gradient differently;
    the bars: rtol = atol = 2e-6 (float32), 1e-12 (float64)."""
    with strict_numerics(0, x64=True):
        theirs, mine = _run(dtype, _batches(50, 40, seed=4), {"lr": 0.02})
        assert mine[3] == theirs[3]
        rtol = 1e-12 if dtype == "float64" else 2e-6
        for a, b in zip(mine[:3], theirs[:3]):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


@pytest.mark.slow
@pytest.mark.parametrize("padding_idx", [0, -2])
def test_padding_idx_rows_stay(padding_idx):
    with strict_numerics(0, x64=True):
        theirs, mine = _run("float64", _batches(20, 12, seed=5), {"lr": 0.03}, padding_idx=padding_idx)
        _assert_close(theirs, mine, "float64")


def test_two_sparse_dims_and_masked_grad():
    """A gradient with two sparse dims (``dense.to_sparse()``) and a MaskedGrad: torch's arithmetic on the
    present entries only."""
    with strict_numerics(0, x64=True):
        rng = np.random.default_rng(0)
        p = torch.nn.Parameter(torch.from_numpy(rng.standard_normal((4, 3)).astype(np.float32)))
        opt = torch.optim.SparseAdam([p], lr=0.1)
        tx = sparseadam(lr=0.1)
        params = {"p": jnp.asarray(p.detach().numpy())}
        state = tx.init(params)
        for k in range(6):
            dense = rng.standard_normal((4, 3)).astype(np.float32) * (rng.random((4, 3)) < 0.5)
            p.grad = torch.from_numpy(dense).to_sparse()
            opt.step()
            sparse = p.grad
            if k % 2:
                grad = SA.SparseGrad(jnp.asarray(sparse.indices().numpy()), jnp.asarray(sparse.values().numpy()))
            else:
                grad = SA.MaskedGrad(jnp.asarray(dense), jnp.asarray(dense != 0))
            params, state = tx.step({"p": grad}, state, params)
        tol = sqrt_tolerances("float32")
        np.testing.assert_allclose(np.asarray(params["p"]), p.detach().numpy(), rtol=tol.get("rtol", 0),
                                   atol=tol.get("atol", 0))
        if not tol:
            np.testing.assert_array_equal(np.asarray(params["p"]), p.detach().numpy())


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bit_identical_grid(dtype, seed):
    rng = np.random.default_rng(seed)
    kwargs = {"lr": float(10 ** rng.uniform(-3, -1)), "betas": (float(rng.uniform(0, 0.99)), float(rng.uniform(0.9, 0.9999))),
              "eps": float(10 ** rng.uniform(-10, -4)), "maximize": bool(seed % 2)}
    with strict_numerics(0, x64=True):
        theirs, mine = _run(dtype, _batches(50, 16, seed=seed + 10), kwargs)
        _assert_close(theirs, mine, dtype)
        theirs, mine = _run(dtype, _batches(50, 64, seed=seed + 20), kwargs, feed="coalesced")
        _assert_close(theirs, mine, dtype)


def test_errors_match_torch():
    p = [torch.nn.Parameter(torch.zeros(2))]
    for kwargs in ({"lr": 0.0}, {"eps": 0.0}, {"betas": (1.0, 0.9)}, {"betas": (0.9, -0.1)}):
        with pytest.raises(ValueError) as theirs:
            torch.optim.SparseAdam(p, **kwargs)
        with pytest.raises(ValueError) as mine:
            sparseadam(**kwargs)
        assert str(mine.value) == str(theirs.value)
    p[0].grad = torch.ones(2)
    with pytest.raises(RuntimeError) as theirs:
        torch.optim.SparseAdam(p).step()
    tx = sparseadam()
    params = {"p": jnp.zeros(2)}
    with pytest.raises(RuntimeError) as mine:
        tx.step({"p": jnp.ones(2)}, tx.init(params), params)
    assert str(mine.value) == str(theirs.value)
