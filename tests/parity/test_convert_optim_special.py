"""State-dict conversion of LBFGS, SparseAdam and Muon, both ways, against real torch optimizers.

Each test steps torch ``k`` times (or ``jax_impl`` ``k`` times), hands the
state over through ``parity.convert``, and steps both sides on: parameters
and torch's ``state_dict()`` must go on agreeing. Adafactor (factored 2-d and
unfactored 1-d moments) runs in ``test_convert_optim.py``'s table.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.optim
from jax_impl.optim import SparseGrad
from parity import strict_numerics
from parity.compare import scaled_error
from parity.convert import optimizer_state_from_torch, optimizer_state_to_torch

@pytest.fixture
def x64():
    """float64 on both sides (jax x64, parity's strict numerics)."""
    with strict_numerics(0, x64=True):
        yield


KS = (0, 1, 3)  # steps before the hand-over (0: torch's empty state)
M = 2  # steps after it


# --------------------------------------------------------------------------- LBFGS

def _lbfgs_problem() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 3)), rng.standard_normal(4)], rng.standard_normal((5, 3)), rng.standard_normal((5, 4))


def _torch_loss(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return ((x @ w.T + b - t) ** 2).sum() + (torch.tanh(w) ** 2).sum()


def _jax_loss(params: list[Any], x: np.ndarray, t: np.ndarray) -> Any:
    w, b = params
    return ((x @ w.T + b - t) ** 2).sum() + (jnp.tanh(w) ** 2).sum()


class _LBFGSPair:
    """torch's LBFGS and jax_impl's on the same float64 problem, stepped with closures."""

    def __init__(self, kwargs: dict[str, Any], params: list[np.ndarray]) -> None:
        self.kwargs = kwargs
        _, self.x, self.t = _lbfgs_problem()
        self.tparams = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
        self.opt = torch.optim.LBFGS(self.tparams, **kwargs)
        self.tx = jax_impl.optim.lbfgs(**kwargs)
        self.jparams = [jnp.asarray(p) for p in params]
        self.jstate = self.tx.init(self.jparams)
        self.grad = jax.jit(jax.value_and_grad(lambda p: _jax_loss(p, self.x, self.t)))

    def torch_step(self) -> None:
        x, t = torch.from_numpy(self.x), torch.from_numpy(self.t)

        def closure():
            self.opt.zero_grad()
            loss = _torch_loss(*self.tparams, x, t)
            loss.backward()
            return loss

        self.opt.step(closure)

    def jax_step(self) -> None:
        _, self.jparams, self.jstate = self.tx.step(self.grad, self.jstate, self.jparams)


def _assert_close(torch_value: Any, ours: Any, where: str, rtol: float) -> None:
    if isinstance(torch_value, (list, tuple)) and all(v is None or v.ndim == 0 for v in torch_value):
        # ro, al: one coefficient per curvature pair, measured against the largest of them
        assert [v is None for v in torch_value] == [v is None for v in ours], where
        _assert_close(torch.stack([v for v in torch_value if v is not None] or [torch.zeros(0)]),
                      torch.stack([v for v in ours if v is not None] or [torch.zeros(0)]), where, rtol)
    elif isinstance(torch_value, (list, tuple)):
        assert len(torch_value) == len(ours), where
        for i, (a, b) in enumerate(zip(torch_value, ours)):
            _assert_close(a, b, f"{where}[{i}]", rtol)
    elif torch_value is None:
        assert ours is None, where
    else:
        assert isinstance(ours, torch.Tensor) == isinstance(torch_value, torch.Tensor), f"{where}: type {type(ours)}"
        a = torch_value.numpy() if isinstance(torch_value, torch.Tensor) else np.asarray(torch_value)
        b = ours.numpy() if isinstance(ours, torch.Tensor) else np.asarray(ours)
        assert b.dtype == a.dtype and b.shape == a.shape, f"{where}: {b.dtype}{b.shape} vs torch's {a.dtype}{a.shape}"
        assert scaled_error(b, a) <= rtol, f"{where}: {scaled_error(b, a):.3g} from torch"


# float64 gradients through a matmul differ from torch's by rounding (XLA's summation order), and LBFGS's
# iterations carry that into every value: max |jax - torch| / max |torch| per value (per list for the
# coefficients ro and al), over the hand-over and 2 steps, measured up to 1.6e-12 (al, k=3, strong Wolfe)
# and 5.5e-13 elsewhere. The conversion itself is lossless: the round trip compares with 0 tolerance.
LBFGS_RTOL = 1e-11
AL_RTOL = 1e-11
LBFGS_CASES = [{"max_iter": 4, "history_size": 3}, {"max_iter": 3, "line_search_fn": "strong_wolfe"}]


def _compare_lbfgs(pair: _LBFGSPair, where: str, rtol: float = LBFGS_RTOL, al_rtol: float = AL_RTOL) -> None:
    for i, (tp, jp) in enumerate(zip(pair.tparams, pair.jparams)):
        error = scaled_error(np.asarray(jp), tp.detach().numpy())
        assert error <= rtol, f"{where} param {i}: {error:.3g} from torch"
    _compare_lbfgs_state(pair.opt.state_dict(), pair.jstate, pair.jparams, pair.kwargs, where, rtol, al_rtol)


def _compare_lbfgs_state(theirs, jstate, jparams, kwargs, where, rtol, al_rtol) -> None:
    exported = optimizer_state_to_torch(jstate, jparams, name="LBFGS", hyperparameters=kwargs)
    assert exported["param_groups"] == theirs["param_groups"], where
    assert list(exported["state"]) == list(theirs["state"]), where
    assert set(exported["state"].get(0, {})) == set(theirs["state"].get(0, {})), where
    for key, value in theirs["state"].get(0, {}).items():
        _assert_close(value, exported["state"][0][key], f"{where} {key}", al_rtol if key == "al" else rtol)


@pytest.mark.parametrize("kwargs", LBFGS_CASES, ids=["fixed-step", "strong-wolfe"])
def test_lbfgs_torch_to_jax_continues(kwargs, x64):
    params, _, _ = _lbfgs_problem()
    for k in KS:
        pair = _LBFGSPair(kwargs, params)
        for _ in range(k):
            pair.torch_step()
        pair.jparams = [jnp.asarray(p.detach().numpy().copy()) for p in pair.tparams]
        pair.jstate = optimizer_state_from_torch(pair.opt.state_dict(), pair.jparams, name="LBFGS")
        # lossless: back to torch, every value and type as torch's own
        _compare_lbfgs_state(pair.opt.state_dict(), pair.jstate, pair.jparams, kwargs, f"round trip k={k}", 0, 0)
        assert pair.jstate.n_iter == pair.opt.state_dict()["state"].get(0, {}).get("n_iter", 0)
        for step in range(M):
            pair.torch_step()
            pair.jax_step()
            _compare_lbfgs(pair, f"torch->jax k={k} step {step + 1}")


@pytest.mark.parametrize("kwargs", LBFGS_CASES, ids=["fixed-step", "strong-wolfe"])
def test_lbfgs_jax_to_torch_continues(kwargs, x64):
    params, _, _ = _lbfgs_problem()
    for k in KS:
        pair = _LBFGSPair(kwargs, params)
        for _ in range(k):
            pair.jax_step()
        exported = optimizer_state_to_torch(pair.jstate, pair.jparams, name="LBFGS", hyperparameters=kwargs)
        with torch.no_grad():
            for tp, jp in zip(pair.tparams, pair.jparams):
                tp.copy_(torch.from_numpy(np.asarray(jp)))
        pair.opt.load_state_dict(exported)
        for step in range(M):
            pair.torch_step()
            pair.jax_step()
            _compare_lbfgs(pair, f"jax->torch k={k} step {step + 1}")


def test_lbfgs_conversion_errors(x64):
    params = [jnp.zeros((4, 3)), jnp.zeros(4)]
    good = {"state": {0: {"func_evals": 1, "n_iter": 1, "d": torch.zeros(16, dtype=torch.float64)}},
            "param_groups": [{"params": [0, 1]}]}
    assert optimizer_state_from_torch(good, params, name="LBFGS").d.shape == (16,)
    with pytest.raises(ValueError, match="shape"):
        optimizer_state_from_torch({**good, "state": {0: {"d": torch.zeros(15, dtype=torch.float64)}}}, params,
                                   name="LBFGS")
    with pytest.raises(ValueError, match="dtype"):
        optimizer_state_from_torch({**good, "state": {0: {"d": torch.zeros(16)}}}, params, name="LBFGS")
    with pytest.raises(KeyError, match="index 0"):
        optimizer_state_from_torch({**good, "state": {1: {}}}, params, name="LBFGS")
    with pytest.raises(ValueError, match="parameter groups"):
        optimizer_state_from_torch({**good, "param_groups": [{}, {}]}, params, name="LBFGS")
    with pytest.raises(ValueError, match="expected an LBFGSState"):
        optimizer_state_to_torch(jax_impl.optim.adam().init(params), params, name="LBFGS")
    assert optimizer_state_to_torch(jax_impl.optim.lbfgs().init(params), params, name="LBFGS")["state"] == {}


# --------------------------------------------------------------------------- SparseAdam

ROWS, DIM = 6, 3


def _sparse_grads(steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Embedding-like gradients: a few looked-up rows per step (duplicates included)."""
    rng = np.random.default_rng(2)
    return [(rng.integers(0, ROWS, (1, 4)), rng.standard_normal((4, DIM)).astype(np.float32)) for _ in range(steps)]


class _SparseAdamPair:
    def __init__(self, kwargs: dict[str, Any], weight: np.ndarray) -> None:
        self.kwargs = kwargs
        self.tparam = torch.nn.Parameter(torch.from_numpy(weight.copy()))
        self.opt = torch.optim.SparseAdam([self.tparam], **kwargs)
        with strict_numerics():
            self.tx = jax_impl.optim.sparseadam(**kwargs)
        self.jparams = {"weight": jnp.asarray(weight)}
        self.jstate = self.tx.init(self.jparams)

    def step(self, indices: np.ndarray, values: np.ndarray, side: str) -> None:
        grad = torch.sparse_coo_tensor(torch.from_numpy(indices), torch.from_numpy(values), (ROWS, DIM))
        if side in ("torch", "both"):
            self.tparam.grad = grad
            self.opt.step()
        if side in ("jax", "both"):  # torch's coalesced entries: the same duplicate sums (sparse_adam's docstring)
            coalesced = grad.coalesce()
            sparse = SparseGrad(jnp.asarray(coalesced.indices().numpy()), jnp.asarray(coalesced.values().numpy()))
            self.jparams, self.jstate = self.tx.step({"weight": sparse}, self.jstate, self.jparams)

    def compare(self, where: str) -> None:
        np.testing.assert_array_equal(np.asarray(self.jparams["weight"]), self.tparam.detach().numpy(), err_msg=where)
        exported = optimizer_state_to_torch(self.jstate, self.jparams, name="SparseAdam", hyperparameters=self.kwargs)
        theirs = self.opt.state_dict()
        assert exported["param_groups"] == theirs["param_groups"], where
        for key, value in theirs["state"][0].items():
            got = exported["state"][0][key]
            if key == "step":
                assert type(got) is int and got == value, where
            else:
                np.testing.assert_array_equal(got.numpy(), value.numpy(), err_msg=f"{where} {key}")


@pytest.mark.parametrize("direction", ["torch->jax", "jax->torch"])
def test_sparse_adam_continues_across_the_hand_over(direction):
    """Bit-identical parameters and state after the hand-over, both directions (step a Python int in torch)."""
    kwargs = {"lr": 0.01, "betas": (0.8, 0.99)}
    weight = np.random.default_rng(3).standard_normal((ROWS, DIM)).astype(np.float32)
    grads = _sparse_grads(max(KS) + M)
    for k in KS:
        pair = _SparseAdamPair(kwargs, weight)
        first = "torch" if direction == "torch->jax" else "jax"
        for indices, values in grads[:k]:
            pair.step(indices, values, first)
        if first == "torch":
            pair.jparams = {"weight": jnp.asarray(pair.tparam.detach().numpy().copy())}
            pair.jstate = optimizer_state_from_torch(pair.opt.state_dict(), pair.jparams, name="SparseAdam")
            assert int(pair.jstate.count) == k
        else:
            exported = optimizer_state_to_torch(pair.jstate, pair.jparams, name="SparseAdam", hyperparameters=kwargs)
            with torch.no_grad():
                pair.tparam.copy_(torch.from_numpy(np.asarray(pair.jparams["weight"])))
            pair.opt.load_state_dict(exported)
        for step, (indices, values) in enumerate(grads[k:k + M]):
            pair.step(indices, values, "both")
            pair.compare(f"{direction} k={k} step {step + 1}")


# --------------------------------------------------------------------------- Muon

def test_muon_momentum_buffers_both_ways():
    """torch's Muon keeps momentum_buffer per (2-d) parameter and no step: both directions continue with
    bit-identical parameters and buffers (ns_steps=0 leaves out the bfloat16 products, whose summation order
    test_muon.py measures)."""
    kwargs = {"lr": 0.02, "ns_steps": 0, "weight_decay": 0.01}
    rng = np.random.default_rng(4)
    shapes = [(4, 3), (3, 5)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(4)]
    tx = jax_impl.optim.muon(**kwargs)
    names = ["0", "1"]

    def torch_run(params, steps, opt=None):
        opt = opt or torch.optim.Muon(params, **kwargs)
        for g in steps:
            for p, gi in zip(params, g):
                p.grad = torch.from_numpy(gi.copy())
            opt.step()
        return opt

    def jax_run(params, state, steps):
        for g in steps:
            params, state = tx.step({n: jnp.asarray(gi) for n, gi in zip(names, g)}, state, params)
        return params, state

    # torch -> jax
    tparams = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in start]
    opt = torch_run(tparams, grads[:2])
    jparams = {n: jnp.asarray(p.detach().numpy().copy()) for n, p in zip(names, tparams)}
    jstate = optimizer_state_from_torch(opt.state_dict(), jparams, name="Muon")
    torch_run(tparams, grads[2:], opt)
    jparams, jstate = jax_run(jparams, jstate, grads[2:])
    for n, p in zip(names, tparams):
        np.testing.assert_array_equal(np.asarray(jparams[n]), p.detach().numpy())
    # jax -> torch
    jparams, jstate = jax_run({n: jnp.asarray(p) for n, p in zip(names, start)}, tx.init(
        {n: jnp.asarray(p) for n, p in zip(names, start)}), grads[:2])
    exported = optimizer_state_to_torch(jstate, jparams, name="Muon", hyperparameters=kwargs)
    assert set(exported["state"][0]) == {"momentum_buffer"}
    tparams = [torch.nn.Parameter(torch.from_numpy(np.asarray(jparams[n]).copy())) for n in names]
    opt = torch.optim.Muon(tparams, **kwargs)
    opt.load_state_dict(exported)
    torch_run(tparams, grads[2:], opt)
    jparams, jstate = jax_run(jparams, jstate, grads[2:])
    for n, p in zip(names, tparams):
        np.testing.assert_array_equal(np.asarray(jparams[n]), p.detach().numpy())
        np.testing.assert_array_equal(np.asarray(jstate.momentum_buffer[n]), opt.state[p]["momentum_buffer"].numpy())
