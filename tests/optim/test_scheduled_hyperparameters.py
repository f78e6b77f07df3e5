"""lr, momentum and betas given as schedules, against torch's param_group values changed between steps."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from jax_impl import optim
from parity import assert_parity, strict_numerics
from parity.numerics import sqrt_tolerances

STEPS = 60


def trajectories(torch_opt_fn, jax_tx, set_torch_group, seed=0, jit=True):
    rng = np.random.default_rng(seed)
    shapes = {"w": (6, 4), "b": (4,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    torch_params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    torch_opt = torch_opt_fn(list(torch_params.values()))
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    state = jax_tx.init(jax_params)
    step = jax.jit(jax_tx.step) if jit else jax_tx.step
    for k in range(STEPS):
        set_torch_group(torch_opt.param_groups[0], k)
        grads = {name: rng.standard_normal(s).astype(np.float32) for name, s in shapes.items()}
        for name, p in torch_params.items():
            p.grad = torch.from_numpy(grads[name])
        torch_opt.step()
        jax_params, state = step(grads, state, jax_params)
    return {k: v.detach() for k, v in torch_params.items()}, jax_params


@pytest.mark.parametrize("jit", [True, False])
def test_host_lr_schedule_matches_lambda_lr(jit):
    with strict_numerics():
        tx = optim.adam(lr=optim.host_schedule(lambda k: 0.01 * 0.97**k))
    ref, out = trajectories(
        lambda p: torch.optim.Adam(p, lr=0.01), tx, lambda group, k: group.update(lr=0.01 * 0.97**k), jit=jit
    )
    # bit-identical: the lr is the same Python float on both sides (sqrt: see parity.numerics.sqrt_tolerances)
    assert_parity(ref, out, **sqrt_tolerances())


def test_host_momentum_and_beta1_schedules():
    momentum = lambda k: 0.95 - 0.1 * (k / STEPS)  # noqa: E731 - what OneCycleLR does to momentum
    with strict_numerics():
        sgd = optim.sgd(lr=optim.host_schedule(lambda k: 0.05 + 0.001 * k), momentum=optim.host_schedule(momentum))
        adamw = optim.adamw(lr=1e-2, betas=(optim.host_schedule(momentum), 0.999))
    ref, out = trajectories(
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.95), sgd, lambda g, k: g.update(lr=0.05 + 0.001 * k, momentum=momentum(k))
    )
    assert_parity(ref, out)
    ref, out = trajectories(lambda p: torch.optim.AdamW(p, lr=1e-2), adamw, lambda g, k: g.update(betas=(momentum(k), 0.999)))
    assert_parity(ref, out, **sqrt_tolerances())


def test_traced_optax_schedule_is_evaluated_in_graph():
    # An optax schedule is traced (float32) like in optax; with float32-exact
    # values (0.5, 0.25, 0.125) the lr equals torch's Python float exactly.
    schedule = optax.piecewise_constant_schedule(0.5, {20: 0.5, 40: 0.5})
    ref, out = trajectories(
        lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9), optim.sgd(lr=schedule, momentum=0.9),
        lambda g, k: g.update(lr=0.5 * 0.5 ** ((k >= 20) + (k >= 40))),
    )
    assert_parity(ref, out)
