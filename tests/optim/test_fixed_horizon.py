"""``jax_impl.optim.fixed_horizon``: a step traced for a known number of steps holds no host callback and
stays torch's trajectory bit for bit; a step past the horizon gives NaN, never a wrong number."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl import optim
from jax_impl.optim import _base
from jax_impl.optim import lr_scheduler as S
from parity import strict_numerics
from tests.optim._scheduled import assert_same_trajectory

BASE = 0.05

# (jax_impl optimizer, torch class, scheduler pair): scheduled learning rates make the scalar table an open
# one (never converged), the case whose jitted step otherwise keeps a callback past the table; NAdam and
# ASGD also carry float32 scalar state.
OPTIMIZERS = {
    "adam": (optim.adam, torch.optim.Adam, {}),
    "nadam": (optim.nadam, torch.optim.NAdam, {}),
    "asgd": (optim.asgd, torch.optim.ASGD, {"t0": 3.0}),
    "radam": (optim.radam, torch.optim.RAdam, {}),
}
SCHEDULES = {
    "StepLR": (lambda o: torch.optim.lr_scheduler.StepLR(o, 4, 0.5), lambda: S.step_lr(BASE, step_size=4, gamma=0.5)),
    "CosineAnnealingLR": (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 9),
                          lambda: S.cosine_annealing_lr(BASE, T_max=9)),
}
# One case per optimizer in the default tier, the rest of the grid in the slow one.
GRID = [pytest.param(name, schedule, steps, marks=[pytest.mark.slow] if i else [])
        for name in sorted(OPTIMIZERS)
        for i, (schedule, steps) in enumerate(zip(sorted(SCHEDULES) * 2, (5, 23, 17, 40)))]


def _setup(name, schedule, seed):
    make_ours, torch_cls, extra = OPTIMIZERS[name]
    make_torch_sched, make_schedule = SCHEDULES[schedule]
    rng = np.random.default_rng(seed)
    shapes = {"w": (6, 5), "b": (5,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    torch_params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    torch_opt = torch_cls(list(torch_params.values()), lr=BASE, **extra)
    with strict_numerics():
        tx = make_ours(lr=make_schedule(), **extra)
    return rng, shapes, params, torch_params, torch_opt, make_torch_sched(torch_opt), tx


@pytest.mark.parametrize(("name", "schedule", "steps"), GRID)
def test_a_step_traced_for_its_horizon_is_torchs_and_has_no_callback(name, schedule, steps, monkeypatch):
    monkeypatch.setattr(_base, "_OPEN_TABLE_STEPS", 1)  # a table of exactly the horizon (else 8192 rows at least)
    rng, shapes, params, torch_params, torch_opt, torch_sched, tx = _setup(name, schedule, steps)
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(jax_params)
    grads = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    # Without the horizon (jax caches a function's trace: each lambda is traced afresh).
    assert "callback" in jax.jit(lambda *a: tx.step(*a)).lower(grads, state, jax_params).as_text()
    with optim.fixed_horizon(steps):
        assert "callback" not in jax.jit(lambda *a: tx.step(*a)).lower(grads, state, jax_params).as_text()
        # torch's trajectory bit for bit, as without the horizon (the helper's jit traces in the block).
        step, state, jax_params, grads = assert_same_trajectory(torch_params, torch_opt, torch_sched, tx, params,
                                                                shapes, rng, steps, uses_sqrt=name != "asgd")
    # One step past the table: NaN parameters, never a step on a made-up learning rate.
    jax_params, state = step(grads, state, jax_params)
    assert all(np.isnan(np.asarray(v)).all() for v in jax_params.values())


def test_a_foreign_scalar_state_is_nan_inside_the_horizon():
    """NAdam's mu_product from elsewhere (not what the table predicts from the initial state): NaN."""
    _, shapes, params, _, _, _, tx = _setup("nadam", "StepLR", 0)
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(jax_params)._replace(mu_product=jnp.float32(0.5))
    grads = {k: np.ones(s, np.float32) for k, s in shapes.items()}
    with optim.fixed_horizon(10):
        new, _ = jax.jit(tx.step)(grads, state, jax_params)
    assert all(np.isnan(np.asarray(v)).all() for v in new.values())


@pytest.mark.parametrize("steps", [0, -3, 2.5])
def test_the_horizon_is_a_positive_count(steps):
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        with optim.fixed_horizon(steps):
            pass
