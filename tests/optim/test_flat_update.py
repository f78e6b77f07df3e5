"""Conv-kernel parameters on XLA:CPU: the square-root optimizers update them on 2-D views
(``jax_impl.optim._flat_update``), with torch's results, bit for bit where torch's sqrt is known."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jax_impl import optim
from tests._tiers import slow_except
from tests.optim._harness import REPRESENTATIVE, SQRT_FREE, Problem, assert_matches_torch, make_problem, run_both

# Kernels whose last dimension is not a multiple of 4 (5x5, 3x3, a conv1d's 7) take the 2-D route; a 4x4
# kernel, a bias and a 0-d leaf keep theirs, in the same tree.
CONV_SHAPES = {"conv1.weight": (6, 3, 5, 5), "conv2.weight": (8, 6, 3, 3), "conv1d.weight": (4, 3, 7),
               "deconv.weight": (4, 2, 4, 4), "conv2.bias": (8,), "scale": ()}

ROOTED = sorted(set(REPRESENTATIVE) - SQRT_FREE)  # the optimizers whose kernels take a square root


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
# Adam and RMSprop in the default tier (the time budget: each compiles 12 steps), the others in the slow tier.
@pytest.mark.parametrize("name", slow_except(ROOTED, {"adam", "rmsprop"}))
def test_conv_kernels_match_torch(name, dtype):
    """Each square-root optimizer with its options on, 12 steps over a tree of conv kernels: the bar of every
    optimizer test (bit for bit where the probe knows torch's sqrt), parameters and state."""
    arrays = make_problem(Problem(seed=7, shapes=CONV_SHAPES, steps=12), dtype)
    assert_matches_torch(name, run_both(name, REPRESENTATIVE[name], arrays), dtype)


def _barriers(tx, shapes) -> int:
    params = {k: jnp.ones(s, jnp.float32) for k, s in shapes.items()}
    text = jax.jit(lambda p, s, g: tx.step(g, s, p)).lower(params, tx.init(params), params).as_text()
    return text.count("jax_impl_barrier")


def test_the_route_is_taken_where_it_applies():
    """One barrier for all the rooted kernels of a step; none for a tree without such a kernel, for an
    update without a square root, or for an optimizer whose kernel is not elementwise (Adafactor factors
    its second moment over the last two dimensions)."""
    if jax.default_backend() != "cpu":
        pytest.skip("the route is XLA:CPU's")
    assert _barriers(optim.adam(), CONV_SHAPES) == 1
    assert _barriers(optim.adagrad(), CONV_SHAPES) == 1
    assert _barriers(optim.adam(), {"deconv.weight": (4, 2, 4, 4), "fc.weight": (3, 5), "bias": (3,)}) == 0
    assert _barriers(optim.sgd(lr=0.1, momentum=0.9), CONV_SHAPES) == 0
    assert _barriers(optim.adafactor(), CONV_SHAPES) == 0
    assert _barriers(optim.adam(), {"empty.weight": (0, 3, 3, 3)}) == 0


def test_a_vmapped_step_is_each_replicas_step():
    """Under ``jax.vmap`` (data-parallel replicas, ``jax_mode: vmap``) the views and the barrier map over the
    replicas: each replica's result is its own step's, bit for bit."""
    tx = optim.rmsprop(lr=1e-2, centered=True, momentum=0.5)
    keys = jax.random.split(jax.random.key(3), 4)
    params = {"w": jax.random.normal(keys[0], (2, 8, 6, 3, 3)), "b": jax.random.normal(keys[1], (2, 8))}
    grads = {"w": jax.random.normal(keys[2], (2, 8, 6, 3, 3)), "b": jax.random.normal(keys[3], (2, 8))}
    states = jax.vmap(tx.init)(params)
    step = jax.jit(jax.vmap(lambda g, s, p: tx.step(g, s, p)))
    mapped, _ = step(grads, states, params)
    for i in range(2):
        one = jax.tree.map(lambda x: x[i], (grads, states, params))
        alone, _ = jax.jit(tx.step)(*one)
        for name in ("w", "b"):
            assert jnp.array_equal(mapped[name][i], alone[name]), name
