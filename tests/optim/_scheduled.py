"""Shared loop of the scheduler trajectory tests: torch optimizer + scheduler vs a jax_impl transformation."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from parity import assert_parity
from parity.numerics import sqrt_tolerances


def assert_same_trajectory(torch_params, torch_opt, torch_sched, tx, params, shapes, rng, steps, *, uses_sqrt):
    """Steps both sides on the same seeded gradients (scheduler after each step) and asserts bit-identity.

    Bit-identity needs jax_impl to reproduce torch's sqrt on this CPU when the optimizer takes one
    (``uses_sqrt``); where the probe does not recognise torch's sqrt (an unknown CPU/MKL),
    ``parity.numerics.sqrt_tolerances`` gives the fallback bar instead.

    Returns ``(jitted step, state, params, last gradients)`` of the JAX side, to step it further."""
    jax_params = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(jax_params)
    step = jax.jit(tx.step)
    for _ in range(steps):
        grads = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        for k, p in torch_params.items():
            p.grad = torch.from_numpy(grads[k])
        torch_opt.step()
        torch_sched.step()
        jax_params, state = step(grads, state, jax_params)
    assert_parity({k: v.detach() for k, v in torch_params.items()}, jax_params, **sqrt_tolerances(uses_sqrt=uses_sqrt))
    return step, state, jax_params, grads
