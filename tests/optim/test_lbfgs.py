"""``jax_impl.optim.lbfgs`` against ``torch.optim.LBFGS``: 50 steps on seeded problems, with and without the
strong-Wolfe line search, the same closure evaluations in the same order, the same state."""

from __future__ import annotations

import functools
import importlib
import io
import itertools
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.optim
from jax_impl.optim.lbfgs_dot import mkl_dot_isa
from parity.numerics import match_torch_sqrt
from tests.optim import _harness as H


def _rosenbrock(x, xp=np):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


def _problems(seed: int):
    """``(name, x0, torch loss, jax loss)``: a convex quadratic, Rosenbrock, and a tiny LSTM regression."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((6, 6))
    a = m @ m.T + 0.5 * np.eye(6)
    b = rng.standard_normal(6)
    yield ("quadratic", [rng.standard_normal(6)],
           lambda p: 0.5 * p[0] @ torch.from_numpy(a) @ p[0] - torch.from_numpy(b) @ p[0],
           lambda p: 0.5 * p[0] @ jnp.asarray(a) @ p[0] - jnp.asarray(b) @ p[0])
    start = np.concatenate([[-1.2, 1.0], rng.uniform(-1, 1, 2)])
    yield "rosenbrock", [start], lambda p: _rosenbrock(p[0]), lambda p: _rosenbrock(p[0])

    # An LSTM cell unrolled over 5 steps and a linear read-out, fitted to a sine: torch.nn.LSTMCell's
    # arithmetic written out on both sides over the same flat parameters.
    hidden, steps = 3, 5
    xs = np.sin(np.linspace(0, 3, steps + 1))
    sizes = [(4 * hidden, 1), (4 * hidden, hidden), (4 * hidden,), (1, hidden), (1,)]
    params = [rng.uniform(-0.5, 0.5, s) for s in sizes]

    def lstm_loss(p, lib):
        w_ih, w_hh, bias, w_out, b_out = p
        h = lib.zeros(hidden, dtype=w_ih.dtype) if lib is torch else jnp.zeros(hidden, w_ih.dtype)
        c = h
        loss = 0.0
        for t in range(steps):
            gates = w_ih[:, 0] * xs[t] + w_hh @ h + bias
            i, f, g, o = (gates[k * hidden:(k + 1) * hidden] for k in range(4))
            c = lib.sigmoid(f) * c + lib.sigmoid(i) * lib.tanh(g)
            h = lib.sigmoid(o) * lib.tanh(c)
            loss = loss + ((w_out @ h + b_out)[0] - xs[t + 1]) ** 2
        return loss

    sigmoid_lib = type("jnp_lib", (), {"sigmoid": staticmethod(jax.nn.sigmoid), "tanh": staticmethod(jnp.tanh)})
    yield "lstm", params, lambda p: lstm_loss(p, torch), lambda p: lstm_loss(p, sigmoid_lib)


def _run(name, x0, torch_loss, jax_loss, dtype, steps=50, closure_from_torch=False, **options):
    """torch's LBFGS and ours side by side. With ``closure_from_torch`` our closure returns torch's loss and
    gradients for the parameters it is given, so that only the optimizers' own arithmetic differs."""
    t_params = [torch.nn.Parameter(torch.tensor(x, dtype=dtype)) for x in x0]
    t_opt = torch.optim.LBFGS(t_params, **options)
    torch_calls = []

    def closure():
        t_opt.zero_grad()
        loss = torch_loss(t_params)
        loss.backward()
        torch_calls.append(float(loss.detach()))
        return loss

    jax_calls = []
    value_and_grad = jax.jit(jax.value_and_grad(jax_loss))

    def jax_closure(params):
        if closure_from_torch:
            tensors = [torch.tensor(np.asarray(p), dtype=dtype, requires_grad=True) for p in params]
            loss = torch_loss(tensors)
            loss.backward()
            loss, grads = float(loss.detach()), [t.grad.numpy() for t in tensors]
        else:
            loss, grads = value_and_grad(params)
        jax_calls.append(float(loss))
        return loss, grads

    np_dtype = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    params = [np.asarray(x, np_dtype) for x in x0]
    # torch's line search takes MKL's sqrt of a 0-d tensor (test_line_search_sqrt_follows_the_sqrt_mode): the
    # optimizer is built under the installed torch's sqrt mode ("table" on CPUs not made by Intel).
    before = jax_impl.optim.get_sqrt_mode()
    match_torch_sqrt()
    try:
        tx = jax_impl.optim.lbfgs(**options)
    finally:
        jax_impl.optim.set_sqrt_mode(before)
    state = tx.init(params)
    torch_losses, jax_losses = [], []
    for _ in range(steps):
        torch_losses.append(float(t_opt.step(closure)))
        loss, params, state = tx.step(jax_closure, state, params)
        jax_losses.append(float(loss))
    return t_opt, t_params, torch_calls, torch_losses, params, state, jax_calls, jax_losses


_OPTIONS = [
    dict(),
    dict(line_search_fn="strong_wolfe"),
    dict(lr=0.5, max_iter=5, history_size=3),
    dict(lr=0.8, max_iter=4, history_size=2, line_search_fn="strong_wolfe", tolerance_change=1e-12),
]


_PROBLEMS = ["quadratic", "rosenbrock", "lstm"]

# torch's own float64 LBFGS is not one function of its inputs: its dot products are MKL's, whose summation
# order follows the instruction set MKL dispatches to, and its elementwise kernels follow ATen's CPU
# capability. After 50 steps on Rosenbrock, ATEN_CPU_CAPABILITY=default moves torch's closure values by
# 2.5e-7 relative and MKL's AVX2 kernels by 8.9e-8 against AVX-512. Those runs are the yardstick for the
# ill-conditioned problems.
_TORCH_VARIANTS = ({"ATEN_CPU_CAPABILITY": "default"}, {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"})
_TRAJECTORIES = """
import sys, numpy as np, torch
from tests.optim.test_lbfgs import _OPTIONS, _PROBLEMS, _problems, _torch_run
out = {}
for problem in _PROBLEMS:
    case = next(c for c in _problems(0) if c[0] == problem)
    for k, options in enumerate(_OPTIONS):
        calls, params = _torch_run(*case[1:3], torch.float64, **options)
        out[f"{problem}-{k}"] = np.concatenate([calls, params])
np.savez(sys.stdout.buffer, **out)
"""


def _torch_run(x0, torch_loss, dtype, steps=50, **options):
    """torch's closure values and final parameters (flat) over ``steps`` steps."""
    params = [torch.nn.Parameter(torch.tensor(x, dtype=dtype)) for x in x0]
    opt = torch.optim.LBFGS(params, **options)
    calls = []

    def closure():
        opt.zero_grad()
        loss = torch_loss(params)
        loss.backward()
        calls.append(float(loss.detach()))
        return loss

    for _ in range(steps):
        opt.step(closure)
    return np.array(calls), np.concatenate([p.detach().numpy().ravel() for p in params])


@functools.lru_cache(maxsize=None)
def _torch_variant(index: int) -> dict:
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, **_TORCH_VARIANTS[index], "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _TRAJECTORIES], env=env, capture_output=True, check=True).stdout
    return dict(np.load(io.BytesIO(out)))


def _relative(a, b) -> float:
    """``max |a - b| / max |b|``: relative to the trajectory's scale (losses near a minimum are near 0)."""
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("options", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_float64_with_a_jax_closure_matches_torch(options):
    """End to end on the quadratic: jax's loss and gradients in our LBFGS, torch's in torch's, 50 steps:
    closure values and parameters within 1e-12 relative (measured 2.7e-16-4.4e-16: jax's closure rounds
    otherwise than torch's), the same evaluations. (The fourth configuration stops one evaluation apart,
    90 against 91, on jax's closure values; on torch's the next test shows it bit-identical.)"""
    case = next(c for c in _problems(0) if c[0] == "quadratic")
    with jax.enable_x64(True):
        _, t_params, t_calls, _, params, _, j_calls, _ = _run(*case, torch.float64, **_OPTIONS[options])
    assert len(j_calls) == len(t_calls)
    theirs = np.concatenate([np.array(t_calls), *[p.detach().numpy().ravel() for p in t_params]])
    assert _relative(np.concatenate([np.array(j_calls), *[np.ravel(p) for p in params]]), theirs) <= 1e-12


def _cases():
    for problem, options in itertools.product(_PROBLEMS, range(len(_OPTIONS))):
        marks = () if options == 0 else (pytest.mark.slow,)  # one configuration per problem in the default tier
        if options == 3 and problem in ("quadratic", "lstm") and mkl_dot_isa() is None:
            # Not strict: on another CPU torch's own code paths may split the same way, and ours may agree.
            marks = (pytest.mark.slow, pytest.mark.xfail(strict=False, reason=(
                "with tolerance_change=1e-12 the run stops one closure evaluation away from torch's (90 against 91, "
                "258 against 257): "
                "the |f - f_prev| < 1e-12 test near the minimum is decided by the last bits of MKL's dot "
                "products, whose kernel on this CPU is not reproduced (NumPy's BLAS sums in another order); "
                "torch's own ATen and MKL code paths happen to agree there")))
        yield pytest.param(problem, options, id=f"{problem}-{options}", marks=marks)


@pytest.mark.parametrize(("problem", "options"), list(_cases()))
def test_float64_optimizer_matches_torch_over_50_steps(problem, options):
    """Our LBFGS on torch's closure numbers (the closure is the user's; this isolates the optimizer): the same
    closure evaluations, counters and history as torch, and closure values and final parameters bit-identical
    (measured 0 on all twelve cases): the dot products are MKL's, summed in its kernel's order
    (``jax_impl.optim.lbfgs_dot``), and the line search's scalar arithmetic is torch's. Where MKL runs a
    kernel not reproduced (``mkl_dot_isa() is None``: NumPy's BLAS sums), within 1e-9 (measured 1e-16 to
    4.3e-11, 3.3e-10 on the LSTM with strong Wolfe): torch is not within 1e-12 of itself across its code
    paths either (ATEN_CPU_CAPABILITY=default or MKL's SSE4.2 kernels move it by up to 1.5e-9), and where
    those paths take different numbers of evaluations (a tolerance test decided by the last bits), ours may
    too."""
    case = next(c for c in _problems(0) if c[0] == problem)
    with jax.enable_x64(True):
        t_opt, t_params, t_calls, _, params, state, j_calls, _ = _run(
            *case, torch.float64, closure_from_torch=True, **_OPTIONS[options])
    theirs = np.concatenate([np.array(t_calls), *[p.detach().numpy().ravel() for p in t_params]])
    ours = np.concatenate([np.array(j_calls), *[np.ravel(p) for p in params]])
    if mkl_dot_isa() is not None:
        assert ours.shape == theirs.shape and np.array_equal(ours, theirs)
    if ours.shape != theirs.shape:
        variants = [_torch_variant(index)[f"{problem}-{options}"] for index in range(len(_TORCH_VARIANTS))]
        assert any(v.shape != theirs.shape for v in variants), "a branch torch's code paths all agree on"
        return
    t_state = t_opt.state[t_params[0]]
    assert (state.func_evals, state.n_iter, len(state.old_dirs)) == (
        t_state["func_evals"], t_state["n_iter"], len(t_state["old_dirs"]))
    assert _relative(ours, theirs) <= 1e-9


@pytest.mark.skipif(mkl_dot_isa() is None, reason="torch's dot here is not one of the MKL kernels reproduced")
@pytest.mark.parametrize(("problem", "options"), [
    pytest.param(problem, options, id=f"{problem}-{options}",
                 marks=() if (problem, options) == ("rosenbrock", 0) else (pytest.mark.slow,))
    for problem, options in itertools.product(["rosenbrock", "lstm"], range(len(_OPTIONS)))])
def test_float32_optimizer_matches_torch_bit_for_bit(problem, options):
    """float32 on torch's closure values: torch's float32 dot products (MKL ``sdot``), ``sum |g|`` (ATen's
    ``cascade_sum``) and float32 scalar arithmetic, so 50 steps give torch's closure values, parameters and
    counters bit for bit (measured on all eight cases; the quadratic's constants are float64 and do not apply)."""
    case = next(c for c in _problems(0) if c[0] == problem)
    t_opt, t_params, t_calls, _, params, state, j_calls, _ = _run(
        *case, torch.float32, closure_from_torch=True, **_OPTIONS[options])
    theirs = np.concatenate([np.array(t_calls), *[p.detach().numpy().ravel() for p in t_params]])
    ours = np.concatenate([np.array(j_calls), *[np.ravel(p) for p in params]])
    assert ours.shape == theirs.shape and np.array_equal(ours, theirs)
    t_state = t_opt.state[t_params[0]]
    assert (state.func_evals, state.n_iter, len(state.old_dirs)) == (
        t_state["func_evals"], t_state["n_iter"], len(t_state["old_dirs"]))


# float32 on the LSTM regression (64 parameters fitted to 5 targets: its minima form a manifold, and a run's
# parameters are where its path meets it) amplifies rounding until one run's distance from float64 is a draw.
# Two measures of it, on an AMD EPYC: the float64 twins (ours on JAX's closure, torch on its own: 1e-16 apart)
# part by d64 at step k, and 2**29 * d64 (float64's rounding scaled to float32's) past 1 means float32's
# parameters there carry no trace of the start; and over 20 starts one float32 ulp apart, the ratio of ours to
# torch's float32 distance. Configuration 0 (lr 1, 20 iterations a step, no line search): 2**29 * d64 = 0.0088
# after step 1, 420 after step 2, 3e5 from step 3 on; torch's own float32 distance at step 10 spreads from 0.09
# to 950 over 40 such starts (quartiles 0.18, 0.35, 0.42), ours likewise (0.23, 0.32, 0.8), so it is judged
# after its first step. Configuration 2 (lr 0.5, 5 iterations, history 3): 2**29 * d64 = 1.6e-4 at step 5,
# 0.048 at 7, 6.5 at 8, 16 at 10, and at step 10 torch's own distance spreads from 0.044 to 23 over 12 starts;
# judged at step 5. Configuration 1 (strong Wolfe) converges by step 5 (2**29 * d64 = 10 at step 3, 0.46
# from step 4 on); judged at step 10.
_FLOAT32_HORIZON = {0: 1, 1: 10, 2: 5}
# The yardstick's second torch run: ATen's elementwise kernels (the closure's sigmoid, tanh, products) at their
# default, unvectorized capability, a torch code path on Intel and AMD CPUs alike. MKL's switches give no other:
# MKL_CBWR (COMPATIBLE, AUTO, SSE4_2), MKL_ENABLE_INSTRUCTIONS=SSE4_2, two threads and ATEN_CPU_CAPABILITY=avx2
# run these configurations bit for bit as the default on the EPYC. The capability is read when torch loads: a
# subprocess, once for the three configurations.
_FLOAT32_DEFAULT_CAPABILITY = """
import sys, numpy as np, torch
from tests.optim.test_lbfgs import _FLOAT32_HORIZON, _OPTIONS, _problems, _torch_run
case = next(c for c in _problems(1) if c[0] == "lstm")
out = {str(k): _torch_run(*case[1:3], torch.float32, steps=n, **_OPTIONS[k])[1] for k, n in _FLOAT32_HORIZON.items()}
np.savez(sys.stdout.buffer, **out)
"""


@functools.lru_cache(maxsize=None)
def _torch_float32_at_default_capability() -> dict:
    """torch's float32 parameters (flat) after each configuration's :data:`_FLOAT32_HORIZON` steps, under
    ``ATEN_CPU_CAPABILITY=default``, by configuration index (a string)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _FLOAT32_DEFAULT_CAPABILITY], env=env, capture_output=True,
                         check=True).stdout
    return dict(np.load(io.BytesIO(out)))


# The fourth configuration (lr 0.8, history 2, strong Wolfe, tolerance_change 1e-12) is measured at 5.4 times
# torch's float32 distance after 10 steps on an Intel Xeon (1.7 on the EPYC, 1.2 against both torch runs):
# beyond the floor there, so it is not claimed.
# Slow tier (about 5 s each): the default tier runs float32 bit for bit against torch above.
@pytest.mark.slow
@pytest.mark.parametrize("options", [0, 1, 2])
def test_float32_is_within_torchs_own_float32_distance(options):
    """float32 LBFGS is chaotic in its branch decisions; so the yardstick is torch's own float32 distance from
    its float64 run on the LSTM regression, the larger of two torch float32 runs (ATen's kernels at this CPU's
    capability and at the default one): ours must be within 5x of it (parity.floor's factor), after the steps
    of :data:`_FLOAT32_HORIZON` (before float32 runs are draws). One run alone is not a yardstick: a distance
    that is a projection of rounding is near zero by chance in one run, and the ratio of two such runs is
    heavy-tailed (at step 10 on the EPYC: 26x for configuration 0, 12x for 2, torch's own distance 0.11 and
    0.073). Measured on the EPYC: 0.045, 3.0 and 0.81x; over 20 starts one float32 ulp apart, at most 1.4, 3.0
    and 1.9x (medians 0.5, 0.8, 0.4), and ours is no farther than torch's in the median."""
    steps = _FLOAT32_HORIZON[options]
    case = next(c for c in _problems(1) if c[0] == "lstm")
    t32 = _run(*case, torch.float32, steps=steps, **_OPTIONS[options])
    with jax.enable_x64(True):
        t64 = _run(*case, torch.float64, steps=steps, **_OPTIONS[options])
    reference = np.concatenate([p.detach().numpy().ravel() for p in t64[1]])
    torch_runs = [np.concatenate([p.detach().numpy().ravel() for p in t32[1]]),
                  _torch_float32_at_default_capability()[str(options)]]
    torch_distance = max(np.abs(run - reference).max() for run in torch_runs)
    ours = np.abs(np.concatenate([np.ravel(p) for p in t32[4]]) - reference).max()
    assert ours <= 5 * max(torch_distance, 1e-6), (ours, torch_distance)


@pytest.mark.skipif(H.torch_sqrt_kind() != "mkl-avx512", reason="torch's CPU sqrt here is not MKL's AVX-512 kernel")
def test_line_search_sqrt_follows_the_sqrt_mode():
    """torch's ``_cubic_interpolate`` takes ``d2_square.sqrt()`` of a 0-d tensor: MKL's sqrt. With the sqrt mode
    ``"mkl-avx512"`` (which ``lbfgs()`` captures) ours matches it bit for bit on seeded random cubics, float64
    and float32; IEEE's sqrt differs on about 0.2% of them (measured 2 and 1 of these 1000)."""
    lbfgs_module = importlib.import_module("jax_impl.optim.lbfgs")
    torch_module = importlib.import_module("torch.optim.lbfgs")
    before = jax_impl.optim.get_sqrt_mode()
    jax_impl.optim.set_sqrt_mode("mkl-avx512")
    try:
        assert jax_impl.optim.lbfgs().sqrt_mode == "mkl-avx512"
    finally:
        jax_impl.optim.set_sqrt_mode(before)
    mkl = lbfgs_module._scalar_sqrt("mkl-avx512")
    rng = np.random.default_rng(0)
    for dtype, torch_dtype in ((np.float64, torch.float64), (np.float32, torch.float32)):
        ieee_bad = 0
        for _ in range(1000):
            x2, (f1, f2), (g1, g2) = rng.uniform(0.1, 2), rng.standard_normal(2).tolist(), rng.standard_normal(2)
            g1, g2 = dtype(g1), dtype(g2)
            theirs = float(torch_module._cubic_interpolate(
                0.0, f1, torch.tensor(g1, dtype=torch_dtype), x2, f2, torch.tensor(g2, dtype=torch_dtype)))
            ieee_bad += float(lbfgs_module._cubic_interpolate(0.0, f1, g1, x2, f2, g2)) != theirs
            assert float(lbfgs_module._cubic_interpolate(0.0, f1, g1, x2, f2, g2, sqrt=mkl)) == theirs
        assert ieee_bad > 0


def test_torchs_checks_and_defaults():
    tx = jax_impl.optim.lbfgs()
    assert (tx.lr, tx.max_iter, tx.max_eval, tx.tolerance_grad, tx.tolerance_change, tx.history_size,
            tx.line_search_fn) == (1, 20, 25, 1e-7, 1e-9, 100, None)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        jax_impl.optim.lbfgs(lr=-1)
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        jax_impl.optim.lbfgs(line_search_fn="backtracking")


def test_an_optimal_start_returns_after_one_evaluation():
    calls = []

    def closure(params):
        calls.append(1)
        return 0.0, [np.zeros(2)]

    tx = jax_impl.optim.lbfgs()
    loss, params, state = tx.step(closure, tx.init(None), [np.ones(2)])
    assert len(calls) == 1 and state.func_evals == 1 and state.n_iter == 0
    np.testing.assert_array_equal(params[0], np.ones(2))
