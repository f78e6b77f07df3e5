"""jax_impl/optim/_buffers.py: optimizer state buffers made without compiling a computation per shape."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl import optim
from jax_impl.optim import _buffers

DTYPES = [jnp.float32, jnp.float64, jnp.float16, jnp.bfloat16]


def _same(a: jax.Array, b: jax.Array) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.weak_type == b.weak_type and a.sharding == b.sharding
            and a.committed == b.committed and np.asarray(a).tobytes() == np.asarray(b).tobytes())


@pytest.mark.parametrize("dtype", DTYPES)
def test_buffers_equal_jnps(dtype):
    """Values, dtype, shape, weak type, device and commitment as ``jnp.zeros_like`` / ``jnp.full_like`` give them,
    for fill values drawn over twelve decades (each cast to the dtype as jnp casts it)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        for p in (jnp.ones((3, 2), dtype), jax.device_put(jnp.ones((5,), dtype), jax.devices()[0])):
            assert _same(_buffers.zeros_like(p), jnp.zeros_like(p))
            expected = jnp.zeros((2, 1), p.dtype)
            assert _same(_buffers.zeros((2, 1), p.dtype, p), jax.device_put(expected, p.sharding) if p.committed
                         else expected)
            for value in [*(rng.random(50) * 10.0 ** rng.integers(-12, 3, 50)), 0.01, 1e-10, 1 / 3]:
                assert _same(_buffers.full_like(p, float(value)), jnp.full_like(p, float(value))), value


def test_buffers_match_torchs_initial_state():
    """torch's Adam and Adagrad start from ``zeros_like`` and ``full_like(initial_accumulator_value)``."""
    w = torch.nn.Parameter(torch.randn(4, 3))
    w.grad = torch.randn(4, 3)
    adagrad = torch.optim.Adagrad([w], initial_accumulator_value=0.3)
    p = jnp.asarray(w.detach().numpy())
    np.testing.assert_array_equal(np.asarray(_buffers.full_like(p, 0.3)), adagrad.state[w]["sum"].numpy())
    np.testing.assert_array_equal(np.asarray(_buffers.zeros_like(p)), torch.zeros_like(w).detach().numpy())


def test_traced_and_weakly_typed_parameters_take_jnp():
    """Under ``jax.jit`` (a tracer) and for a weakly typed array the buffers are jnp's own."""
    out = jax.jit(lambda p: (_buffers.zeros_like(p), _buffers.full_like(p, 2.0)))(jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(out[1]), [2.0, 2.0, 2.0])
    weak = jnp.asarray(1.0)
    assert weak.weak_type and _same(_buffers.zeros_like(weak), jnp.zeros_like(weak))


def test_init_compiles_nothing_and_its_state_can_be_donated(caplog):
    """An optimizer's ``init`` over parameters of shapes never seen before compiles no computation, and every
    buffer is its own (a donating step accepts the state)."""
    params = {"a": jnp.ones((7, 13, 3)), "b": jnp.ones((11, 17)), "c": jnp.ones((19,))}
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
        states = [optim.adam(lr=1e-3, amsgrad=True).init(params), optim.rprop(lr=1e-2).init(params),
                  optim.adagrad(lr=1e-2, initial_accumulator_value=0.1).init(params),
                  optim.adafactor(lr=1e-2).init(params)]
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled, compiled
    for state in states:
        leaves = jax.tree.leaves(state)
        assert len({leaf.unsafe_buffer_pointer() for leaf in leaves}) == len(leaves)
        jax.jit(lambda s: jax.tree.map(lambda x: x + 0, s), donate_argnums=0)(state)


def test_init_under_jit_matches_eager_init():
    """``jax.jit(tx.init)`` (a traced init) gives the eager init's state, scalar state included (NAdam, ASGD)."""
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    for tx in (optim.nadam(lr=2e-3), optim.asgd(lr=1e-2), optim.sgd(lr=0.1, momentum=0.9)):
        eager, traced = tx.init(params), jax.jit(tx.init)(params)
        assert jax.tree.structure(eager) == jax.tree.structure(traced)
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(traced)):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
