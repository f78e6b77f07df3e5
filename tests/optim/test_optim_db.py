"""torch's own OptimizerInfo database (``torch.testing._internal.common_optimizers.optim_db``) against jax_impl.optim.

One test per (optimizer, configuration, dtype): every OptimizerInfo whose
optimizer ``jax_impl.optim`` has (``jax_impl.optim.<name.lower()>``), every
configuration torch's own tests run on CPU
(``_get_optim_inputs_including_global_cliquey_kwargs``: its
``optim_inputs_func(device="cpu")`` configs, each also with ``fused``,
``differentiable`` (and ``foreach`` where the CPU has kernels for it) set),
for :data:`STEPS` steps on a seeded problem (``tests/optim/_harness.py``),
each configuration in float32 or float64 (alternating; both with
``PARITY_OPTIM_DB_ALL=1``). A configuration ``jax_impl.optim``'s
constructor refuses (``NotImplementedError`` for an execution-path flag) is
reported as skipped, with the constructor's message.

- Gradient optimizers: :func:`_harness.run_both` and the harness's bar
  (:func:`_harness.assert_matches_torch`: bit-identical where
  ``jax_impl`` reproduces this machine's torch sqrt). Muon (2-d parameters
  only, as torch enforces) is held to test_muon.py's Frobenius bound: its
  Newton-Schulz products are bfloat16 sums in XLA's order.
- LBFGS: closure steps on a seeded convex quadratic, the closure's loss and
  gradient written out in float64/float32 on both sides.
- SparseAdam: embedding-like sparse gradients (torch's coalesced entries).

A tensor ``lr`` (``torch.tensor(0.001)``) is passed to ``jax_impl`` as its
Python float.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("expecttest")  # torch.testing._internal imports it (the `test` extra installs it)

from torch.testing._internal.common_optimizers import (  # noqa: E402
    _get_optim_inputs_including_global_cliquey_kwargs as torch_optim_inputs,
    optim_db,
)

# Importing torch's test utilities freezes torch.backends' global flags (a rule of torch's own test suite);
# the other tests set those flags through parity.strict_numerics, so they are unfrozen again.
torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_impl.optim  # noqa: E402
from parity.compare import scaled_error  # noqa: E402
from tests.optim import _harness as H  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 20
# PARITY_OPTIM_DB_ALL=1: every configuration in both dtypes (each case compiles its step: about 0.5 s).
ALL = os.environ.get("PARITY_OPTIM_DB_ALL") == "1"
SHAPES = {"scale": (), "fc.bias": (5,), "fc.weight": (4, 3)}
MATRIX_SHAPES = {"weight": (4, 6)}  # one leaf: each Muon configuration compiles its bfloat16 iteration once
# test_muon.py's bound on ||torch - ours|| / ||torch|| per matrix (bfloat16 products in XLA's order).
MUON_FROBENIUS = 1e-5


def _cases() -> list:
    cases = []
    for info in optim_db:
        torch_name = info.optim_cls.__name__
        name = torch_name.lower()
        if name not in jax_impl.optim.__all__:
            continue
        for i, config in enumerate(torch_optim_inputs("cpu", torch.float32, info)):
            flags = "-".join(k for k in ("foreach", "fused", "differentiable", "capturable") if config.kwargs.get(k))
            # By default each configuration runs in one dtype, alternating, so every optimizer meets both.
            for dtype in H.DTYPES if ALL else (H.DTYPES[i % 2],):
                cases.append(pytest.param(torch_name, dict(config.kwargs), dtype,
                                          id=f"{torch_name}-{i}{'-' + flags if flags else ''}-{dtype}"))
    return cases


def _ours(kwargs: dict) -> dict:
    return {k: (v.item() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


def _build_or_skip(name: str, kwargs: dict):
    if name == "SparseAdam" and isinstance(kwargs.get("lr"), torch.Tensor):
        pytest.skip("SparseAdam with a tensor lr: torch computes the step size in the tensor's float32, "
                    "jax_impl.optim.sparseadam takes a Python float")
    try:
        with H.numerics("float32"):
            return getattr(jax_impl.optim, name.lower())(**_ours(kwargs))
    except NotImplementedError as error:
        flags = {k: v for k, v in kwargs.items() if k in H.TORCH_ONLY_FLAGS and v}
        pytest.skip(f"jax_impl.optim.{name.lower()} refuses {flags or kwargs}: {str(error).split(':')[0]}")


@pytest.mark.parametrize(("torch_name", "kwargs", "dtype"), _cases())
def test_optim_db_config_matches_torch(torch_name, kwargs, dtype, monkeypatch):
    name = torch_name.lower()
    _build_or_skip(torch_name, kwargs)
    if name == "lbfgs":
        return _check_lbfgs(kwargs, dtype)
    if name == "sparseadam":
        return _check_sparse_adam(kwargs, dtype)
    monkeypatch.setitem(H.TORCH_NAMES, name, torch_name)  # the harness's table names the dense-gradient ones
    shapes = MATRIX_SHAPES if name == "muon" else SHAPES
    arrays = H.make_problem(H.Problem(seed=0, shapes=shapes, steps=STEPS), dtype)
    # Eager: the step's kernel compiles once, cheaper than a jit of the whole step; the init's ops compile
    # once per leaf shape and dtype for the whole module instead of once per case.
    traj = H.run_both(name, _ours(kwargs), arrays, jit=False, jit_init=False)
    if name == "muon":
        for k, want in traj.torch_params.items():
            error = np.linalg.norm(traj.jax_params[k] - want) / np.linalg.norm(want)
            assert error <= MUON_FROBENIUS, f"{k}: {error:.3g}"
        return None
    H.assert_matches_torch(name, traj, dtype)
    return None


# --------------------------------------------------------------------------- LBFGS


def _lbfgs_runs(kwargs: dict, dtype: str, steps: int = 5) -> tuple[list[np.ndarray], Any, list[np.ndarray], dict]:
    """torch's and ours after ``steps`` closure steps on a convex quadratic ``0.5 x'Ax - b'x`` over two
    parameters: ``(torch params, torch state, our params, our state)``."""
    rng = np.random.default_rng(0)
    m = rng.standard_normal((7, 7))
    a, b = m @ m.T + 0.5 * np.eye(7), rng.standard_normal(7)
    x0 = [rng.standard_normal(4), rng.standard_normal(3)]
    tdtype = getattr(torch, dtype)
    tparams = [torch.nn.Parameter(torch.tensor(x, dtype=tdtype)) for x in x0]
    opt = torch.optim.LBFGS(tparams, **kwargs)
    ta, tb = torch.tensor(a, dtype=tdtype), torch.tensor(b, dtype=tdtype)

    def closure():
        opt.zero_grad()
        x = torch.cat(tparams)
        loss = 0.5 * x @ ta @ x - tb @ x
        loss.backward()
        return loss

    with H.numerics(dtype):
        ja, jb = jnp.asarray(a, dtype), jnp.asarray(b, dtype)

        def loss_fn(params):
            x = jnp.concatenate(params)
            return 0.5 * x @ ja @ x - jb @ x

        tx = jax_impl.optim.lbfgs(**_ours(kwargs))
        params = [np.asarray(x, dtype) for x in x0]
        state, grad = tx.init(params), jax.jit(jax.value_and_grad(loss_fn))
        for _ in range(steps):
            opt.step(closure)
            _, params, state = tx.step(grad, state, params)
    return [p.detach().numpy() for p in tparams], opt.state[tparams[0]], [np.asarray(p) for p in params], state


def _flat(params: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(p) for p in params]).astype(np.float64)


def _check_lbfgs(kwargs: dict, dtype: str) -> None:
    """float64: the same iterations and evaluations, parameters within 1e-12 (the matmuls' summation order
    differs, XLA's vs MKL's: measured <= 1e-15). float32: LBFGS's exits and line-search branches follow the
    rounding, so the yardstick is torch's own float32 distance from its float64 run, as in test_lbfgs.py:
    ours within parity.floor's factor 5 of it."""
    theirs, torch_state, ours, state = _lbfgs_runs(kwargs, dtype)
    if dtype == "float64":
        assert scaled_error(_flat(ours), _flat(theirs)) <= 1e-12
        assert (state.func_evals, state.n_iter) == (torch_state["func_evals"], torch_state["n_iter"])
        return
    reference = _flat(_lbfgs_runs(kwargs, "float64")[0])
    torch_distance = np.abs(_flat(theirs) - reference).max()
    assert np.abs(_flat(ours) - reference).max() <= 5 * max(torch_distance, 1e-6)


# --------------------------------------------------------------------------- SparseAdam


def _check_sparse_adam(kwargs: dict, dtype: str) -> None:
    """STEPS steps of embedding-like sparse gradients (rows looked up with repeats)."""
    rng = np.random.default_rng(0)
    rows, dim = 8, 3
    weight = rng.standard_normal((rows, dim)).astype(dtype)
    tparam = torch.nn.Parameter(torch.from_numpy(weight.copy()))
    opt = torch.optim.SparseAdam([tparam], **kwargs)
    with H.numerics(dtype):
        tx = jax_impl.optim.sparseadam(**_ours(kwargs))
        params = {"weight": jnp.asarray(weight)}
        state = tx.init(params)
        for _ in range(STEPS):
            idx = torch.from_numpy(rng.integers(0, rows, (1, 5)))
            values = torch.from_numpy(rng.standard_normal((5, dim)).astype(dtype))
            grad = torch.sparse_coo_tensor(idx, values, (rows, dim))
            tparam.grad = grad
            opt.step()
            coalesced = grad.coalesce()
            sparse = jax_impl.optim.SparseGrad(jnp.asarray(coalesced.indices().numpy()),
                                               jnp.asarray(coalesced.values().numpy()))
            params, state = tx.step({"weight": sparse}, state, params)
    report = H.compare({"weight": tparam.detach().numpy()}, {"weight": np.asarray(params["weight"])},
                       **H.sqrt_tolerances(dtype))
    assert report.passed, report.table()
