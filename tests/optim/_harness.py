"""Runs ``torch.optim.X`` and ``jax_impl.optim.x`` side by side and judges the result.

Every optimizer test file builds on three pieces:

- :func:`make_problem`: seeded initial parameters (several leaves of different
  shapes, one 0-d) and a gradient sequence, as NumPy arrays of one dtype.
- :func:`run_both`: the same parameters and gradients through real torch and
  through the JAX transformation (built inside ``parity.strict_numerics`` so it
  captures the sqrt mode of the installed torch), returning both final
  parameter dicts, both states, and both parameter dicts after the first step.
- :func:`assert_matches_torch`: the acceptance bar, on parameters and state.

The bar: when ``probe_torch_sqrt()`` recognises torch's CPU sqrt, every
optimizer is bit-identical to torch (max_ulp=0) in float32 and float64. When it
does not (an unknown CPU/MKL), the optimizers without a sqrt stay bit-identical
and the sqrt-based ones must be within 2 ULP after one step and within 1e-5
(float32) / 1e-12 (float64) relative error after the whole trajectory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

import jax_impl.optim
from jax_impl.optim import _base
from parity import compare  # noqa: F401  (re-exported for the test files)
from parity.compare import ComparisonReport
from parity.numerics import match_torch_sqrt, probe_torch_sqrt, sqrt_tolerances, strict_numerics

DTYPES = ("float32", "float64")

# jax_impl name -> torch.optim class name.
TORCH_NAMES = {
    "sgd": "SGD",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adam": "Adam",
    "adamw": "AdamW",
    "adamax": "Adamax",
    "nadam": "NAdam",
    "radam": "RAdam",
    "adadelta": "Adadelta",
    "asgd": "ASGD",
    "rprop": "Rprop",
}

# Optimizers whose torch kernels never call sqrt: bit-identical whatever the CPU.
SQRT_FREE = frozenset({"sgd", "adamax", "asgd", "rprop"})

# The fallback bar for sqrt-based optimizers when torch's sqrt is unknown.
FALLBACK_FIRST_STEP_ULP = 2
FALLBACK_RTOL = {"float32": 1e-5, "float64": 1e-12}

# The torch execution-path flags that jax_impl rejects (they change torch's arithmetic).
TORCH_ONLY_FLAGS = ("foreach", "fused", "capturable", "differentiable")


# A jitted step tabulates its host scalars when it is traced: up to _base._TABLE_STEPS = 32768 rows of
# torch's float64 maths (Python; the fused optimizers' FMAs emulated), stopping early only where the scalars
# converge (Adam's default betas in float32 after some 16.6k steps; float64 runs the whole table): 0.3-0.8 s
# per optimizer built, more than its compile, in tests that run at most 1000 steps (check_long_trajectory).
# tests/optim/conftest.py stops the table at TABLE_STEPS rows in every test but those of the table itself
# (test_scalar_table.py, test_fixed_horizon.py): the rows a test reads are the same host maths, and a count
# past the table takes the step's host callback, the path an open table (a scheduled lr's) takes in use.
TABLE_STEPS = 1024


@contextlib.contextmanager
def short_scalar_tables(rows: int = TABLE_STEPS) -> Iterator[None]:
    """Steps traced inside tabulate at most ``rows`` counts of host scalars (see :data:`TABLE_STEPS`)."""
    previous = _base._TABLE_STEPS
    _base._TABLE_STEPS = rows
    try:
        yield
    finally:
        _base._TABLE_STEPS = previous


@functools.cache
def torch_sqrt_kind() -> str | None:
    """``probe_torch_sqrt()`` once per session: "mkl-avx512", "ieee" or None."""
    return probe_torch_sqrt()


def torch_class(name: str) -> type:
    return getattr(torch.optim, TORCH_NAMES[name])


def examples(n: int) -> settings:
    """Hypothesis settings for trajectory tests: ``n`` examples, no deadline (each example compiles).

    ``parity_record`` is function-scoped but only appends records, so sharing
    it between examples is harmless.
    """
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- problems


@dataclasses.dataclass(frozen=True)
class Problem:
    """What a trajectory runs on, independent of the dtype."""

    seed: int
    shapes: Mapping[str, tuple[int, ...]]
    steps: int = 200
    grad_scale: float = 1.0
    zero_fraction: float = 0.0  # share of gradient entries that are exactly 0
    jit: bool = True  # jax.jit(tx.step), or the eager tx.step (which compiles its kernel itself)


@dataclasses.dataclass(frozen=True)
class Arrays:
    params: dict[str, np.ndarray]
    grads: list[dict[str, np.ndarray]]


def make_problem(problem: Problem, dtype: str) -> Arrays:
    rng = np.random.default_rng(problem.seed)
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in problem.shapes.items()}
    grads = []
    for _ in range(problem.steps):
        step = {}
        for k, s in problem.shapes.items():
            g = rng.standard_normal(s) * problem.grad_scale
            g = np.where(rng.random(s) < problem.zero_fraction, 0.0, g)
            step[k] = np.asarray(g, dtype=dtype)
        grads.append(step)
    return Arrays(params, grads)


_dims = st.integers(1, 6)
_nd_shapes = st.lists(_dims, min_size=2, max_size=3).map(tuple)


@st.composite
def problems(draw: Callable[..., Any], steps: int = 200) -> Problem:
    """Param trees of 3 leaves with different shapes, always one 0-d leaf; random gradients."""
    # Three leaves keep the compile time (per leaf) down; shapes vary per example.
    shapes = {"scale": (), "fc.bias": (draw(_dims),), "fc.weight": draw(_nd_shapes)}
    return Problem(
        seed=draw(st.integers(0, 2**32 - 1)),
        shapes=shapes,
        steps=steps,
        grad_scale=draw(st.sampled_from([1e-3, 1.0, 10.0])),
        zero_fraction=draw(st.sampled_from([0.0, 0.0, 0.2])),
        # Both call paths must equal torch; an eager run costs the same one compile.
        jit=draw(st.sampled_from([True, True, False])),
    )


def log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(np.log10(lo), np.log10(hi)).map(lambda e: float(10.0**e))


def zero_or(strategy: st.SearchStrategy[float]) -> st.SearchStrategy[float]:
    """0.0 (the common default, which takes a different code path) or a draw from ``strategy``."""
    return st.one_of(st.just(0.0), strategy)


def betas() -> st.SearchStrategy[tuple[float, float]]:
    return st.tuples(st.sampled_from([0.0, 0.5, 0.9]) | st.floats(0.0, 0.99), st.sampled_from([0.9, 0.99, 0.999]) | st.floats(0.5, 0.9999))


def adam_family_kwargs(**extra: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Adam, AdamW, Adamax, NAdam, RAdam: the shared lr/betas/eps/weight_decay/maximize draws plus ``extra``."""
    return st.fixed_dictionaries(
        {
            "lr": log_uniform(1e-4, 0.1),
            "betas": betas(),
            "eps": st.just(1e-8) | log_uniform(1e-10, 1e-3),
            "weight_decay": zero_or(log_uniform(1e-5, 0.1)),
            "maximize": st.booleans(),
            **extra,
        }
    )


# --------------------------------------------------------------------------- running both sides


@dataclasses.dataclass
class Trajectory:
    torch_params: dict[str, np.ndarray]
    jax_params: dict[str, np.ndarray]
    torch_first: dict[str, np.ndarray]  # after step 1
    jax_first: dict[str, np.ndarray]
    initial: dict[str, np.ndarray]  # before step 1
    torch_state: dict[str, dict[str, Any]]  # param name -> torch's opt.state[p]
    jax_state: Any  # the NamedTuple, leaves as NumPy
    steps: int


def _torch_step_fn(name: str, kwargs: Mapping[str, Any], params: Mapping[str, np.ndarray]):
    tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    opt = torch_class(name)(list(tparams.values()), **kwargs)

    def step(grads: Mapping[str, np.ndarray]) -> None:
        for k, p in tparams.items():
            p.grad = torch.from_numpy(np.array(grads[k]))
        opt.step()

    def snapshot() -> dict[str, np.ndarray]:
        return {k: p.detach().numpy().copy() for k, p in tparams.items()}

    def state() -> dict[str, dict[str, Any]]:
        return {k: {sk: (sv.detach().clone() if torch.is_tensor(sv) else sv) for sk, sv in opt.state[p].items()} for k, p in tparams.items()}

    return step, snapshot, state


def build(name: str, kwargs: Mapping[str, Any]) -> Any:
    return getattr(jax_impl.optim, name)(**kwargs)


@contextlib.contextmanager
def numerics(dtype: str) -> Iterator[None]:
    """``strict_numerics`` with x64 on for float64, sqrt mode set to the probed torch's.

    Build the JAX optimizer inside: it captures the sqrt mode when built. The
    probe runs once per session (:func:`torch_sqrt_kind`) rather than on each entry.
    """
    with strict_numerics(seed=None, x64=(dtype == "float64"), match_sqrt=False):
        if torch_sqrt_kind() is not None:
            match_torch_sqrt()  # cached probe; "table" also registers torch's sqrt table
        yield


def run_both(name: str, kwargs: Mapping[str, Any], arrays: Arrays, *, jit: bool = True,
             jit_init: bool = True) -> Trajectory:
    """Same initial params and gradients through torch and jax_impl; everything returned as NumPy.

    Args:
      name: the jax_impl optimizer (a key of :data:`TORCH_NAMES`).
      kwargs: its arguments, the same for torch's class.
      arrays: the initial parameters and the gradients of each step.
      jit: ``jax.jit(tx.step)``, or the eager ``tx.step``.
      jit_init: ``jax.jit(tx.init)`` (one compile per optimizer built, cheaper than its eager ops compiled
        for a single run: 26-35 ms against 44-54 ms of CPU for Adam, NAdam and Rprop over LONG_SHAPES in a
        fresh process), or the eager ``tx.init`` (its ``zeros_like``/``full_like`` ops compile once per
        leaf shape and dtype in the process: no compile at all in a module that builds many optimizers over
        the same shapes). Both give the same state: zeros and constant fills.
    """
    dtype = str(next(iter(arrays.params.values())).dtype)
    with numerics(dtype):
        tx = build(name, kwargs)
        torch_step, torch_snapshot, torch_state = _torch_step_fn(name, kwargs, arrays.params)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        state = jax.jit(tx.init)(params) if jit_init else tx.init(params)
        step = jax.jit(tx.step) if jit else tx.step
        for i, grads in enumerate(arrays.grads):
            torch_step(grads)
            params, state = step(grads, state, params)
            if i == 0:
                torch_first, jax_first = torch_snapshot(), to_numpy(params)
        return Trajectory(
            torch_params=torch_snapshot(),
            jax_params=to_numpy(params),
            torch_first=torch_first,
            jax_first=jax_first,
            initial=dict(arrays.params),
            torch_state=torch_state(),
            jax_state=to_numpy(state),
            steps=len(arrays.grads),
        )


def to_numpy(tree: Any) -> Any:
    return jax.tree.map(np.asarray, tree)


# --------------------------------------------------------------------------- judging


def state_pairs(traj: Trajectory) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """torch's per-parameter state vs ours, keyed ``"{state name}.{param name}"``.

    torch's state keys are our NamedTuple field names. Per-parameter tensors
    map to ``field[param]``; torch's per-parameter 0-d scalars (NAdam's
    ``mu_product``, ASGD's ``eta``/``mu``) map to our single scalar field.
    ``step`` is checked by :func:`assert_state_matches` against ``count``.
    """
    fields = traj.jax_state._asdict()
    torch_side, jax_side = {}, {}
    for pname, pstate in traj.torch_state.items():
        for key, value in pstate.items():
            if key == "step":
                continue
            assert key in fields, f"torch state {key!r} has no field in {type(traj.jax_state).__name__}"
            ours = fields[key]
            torch_side[f"{key}.{pname}"] = value
            jax_side[f"{key}.{pname}"] = ours[pname] if isinstance(ours, dict) else ours
    return torch_side, jax_side


def assert_state_matches(traj: Trajectory, **tolerances: Any) -> ComparisonReport:
    for pname, pstate in traj.torch_state.items():
        if "step" in pstate:
            assert float(pstate["step"]) == int(traj.jax_state.count) == traj.steps, (pname, pstate["step"], traj.jax_state.count)
    # Our per-parameter fields torch does not keep (e.g. max_exp_avg_sq without amsgrad) hold None: no buffers.
    torch_keys = {k for s in traj.torch_state.values() for k in s}
    for field, value in traj.jax_state._asdict().items():
        if field != "count" and field not in torch_keys and isinstance(value, dict):
            assert all(v is None for v in value.values()), f"{field} is not kept by torch but holds buffers"
    torch_side, jax_side = state_pairs(traj)
    report = compare(torch_side, jax_side, **tolerances)
    assert report.passed, f"optimizer state differs from torch's:\n{report.table()}"
    return report


def bit_identical_expected(name: str, dtype: str = "float32") -> bool:
    return name in SQRT_FREE or not sqrt_tolerances(dtype)


def assert_first_step_within_operand_ulps(name: str, traj: Trajectory) -> None:
    """Fallback first-step bar: ``|torch - ours| <= 2 ULP`` of the step's operands ``max(|p0|, |p1|)``.

    A 1-ULP sqrt difference changes the update ``u`` by about an ULP of ``u``;
    ``p1 = p0 - u`` then differs by up to that plus rounding. Measured in ULPs
    of ``p1`` itself the gap explodes where ``p0`` and ``u`` cancel (seen: 8
    ULP of a p1 ~ 4e-3 from p0 ~ 0.5 on an AMD EPYC, whose MKL sqrt neither
    mode reproduces), so the bar is taken in ULPs of the operands.
    """
    for key, want in traj.torch_first.items():
        want = np.asarray(want)
        got = np.asarray(traj.jax_first[key])
        scale = np.maximum(np.abs(np.asarray(traj.initial[key])), np.abs(want))
        bound = FALLBACK_FIRST_STEP_ULP * np.spacing(scale.astype(want.dtype))
        excess = np.abs(got.astype(np.float64) - want) - bound
        assert np.all(excess <= 0), (
            f"{name} first step beyond {FALLBACK_FIRST_STEP_ULP} ULP of the operands in {key}: "
            f"max excess {excess.max():.3g}"
        )


def assert_matches_torch(
    name: str,
    traj: Trajectory,
    dtype: str,
    record: Callable[..., None] | None = None,
    **extra: Any,
) -> ComparisonReport:
    """The acceptance bar (module docstring) on parameters and state; records the measured agreement."""
    if bit_identical_expected(name, dtype):
        tolerances: dict[str, Any] = {}
    else:
        assert_first_step_within_operand_ulps(name, traj)
        tolerances = {"rtol": FALLBACK_RTOL[dtype]}
    report = compare(traj.torch_params, traj.jax_params, **tolerances)
    if record is not None:
        record(f"{TORCH_NAMES[name]} {dtype} {traj.steps} steps", report, sqrt=torch_sqrt_kind(), **extra)
    assert report.passed, f"{name} parameters differ from torch after {traj.steps} steps ({extra}):\n{report.table()}"
    assert_state_matches(traj, **tolerances)
    return report


def check_trajectory(
    name: str, kwargs: Mapping[str, Any], problem: Problem, dtype: str, record: Callable[..., None] | None = None
) -> ComparisonReport:
    """One hypothesis example: run both sides and apply the bar."""
    traj = run_both(name, kwargs, make_problem(problem, dtype), jit=problem.jit)
    return assert_matches_torch(name, traj, dtype, record, kwargs=dict(kwargs), shapes=dict(problem.shapes), jit=problem.jit)


# One configuration per optimizer with its non-default options switched on: the
# seeded long trajectories and the cross-optimizer tables (jit/eager, update vs
# step, Rosenbrock) use it.
REPRESENTATIVE = {
    "sgd": dict(lr=0.02, momentum=0.9, dampening=0.1, weight_decay=1e-3),
    "rmsprop": dict(lr=1e-3, alpha=0.95, centered=True, momentum=0.5, weight_decay=1e-2),
    "adagrad": dict(lr=0.05, lr_decay=1e-3, initial_accumulator_value=0.1, weight_decay=1e-3),
    "adam": dict(lr=1e-2, betas=(0.8, 0.99), amsgrad=True, weight_decay=1e-2),
    "adamw": dict(lr=1e-2, amsgrad=True),
    "adamax": dict(lr=1e-2, weight_decay=1e-2),
    "nadam": dict(lr=1e-2, weight_decay=1e-2, decoupled_weight_decay=True, momentum_decay=1e-2),
    "radam": dict(lr=1e-2, weight_decay=1e-2),
    "adadelta": dict(lr=0.5, rho=0.8, weight_decay=1e-3),
    "asgd": dict(lr=0.02, lambd=1e-3, t0=100, weight_decay=1e-3),
    "rprop": dict(lr=0.01, etas=(0.4, 1.3), step_sizes=(1e-5, 1.0)),
}

# Shapes of the seeded long trajectories: several leaves, one 0-d.
LONG_SHAPES = {"fc.weight": (8, 5), "fc.bias": (5,), "scale": ()}


def check_long_trajectory(name: str, record: Callable[..., None], steps: int = 1000, seed: int = 0, **overrides: Any) -> None:
    """The seeded 1000-step float32 trajectory each optimizer file runs once (REPRESENTATIVE config)."""
    problem = Problem(seed=seed, shapes=LONG_SHAPES, steps=steps, zero_fraction=0.05)
    check_trajectory(name, {**REPRESENTATIVE[name], **overrides}, problem, "float32", record)


# --------------------------------------------------------------------------- validation


def torch_value_error(name: str, kwargs: Mapping[str, Any]) -> str | None:
    """torch's ValueError message for these arguments, or None if torch accepts them."""
    try:
        torch_class(name)([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    except ValueError as exc:
        return str(exc)
    return None


def assert_same_validation(name: str, kwargs: Mapping[str, Any]) -> None:
    """Ours raises ValueError with torch's exact message when torch does, and accepts what torch accepts."""
    expected = torch_value_error(name, kwargs)
    if expected is None:
        build(name, kwargs)  # must not raise
        return
    with pytest.raises(ValueError) as info:
        build(name, kwargs)
    assert str(info.value) == expected


def torch_defaults(name: str) -> dict[str, Any]:
    params = inspect.signature(torch_class(name).__init__).parameters
    return {k: (p.kind, p.default) for k, p in params.items() if k not in ("self", "params")}


def jax_defaults(name: str) -> dict[str, Any]:
    params = inspect.signature(getattr(jax_impl.optim, name)).parameters
    return {k: (p.kind, p.default) for k, p in params.items()}


def flags_of(name: str) -> list[str]:
    return [f for f in TORCH_ONLY_FLAGS if f in inspect.signature(torch_class(name).__init__).parameters]


def bitwise_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same keys, dtypes, shapes and bits (so -0.0 != 0.0 and NaN payloads count)."""

    def bits(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return x.view(f"u{x.dtype.itemsize}")

    return a.keys() == b.keys() and all(
        np.asarray(a[k]).dtype == np.asarray(b[k]).dtype and np.array_equal(bits(a[k]), bits(b[k])) for k in a
    )


def all_names() -> Sequence[str]:
    return tuple(TORCH_NAMES)
