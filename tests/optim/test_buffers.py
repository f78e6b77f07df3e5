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


def _placed_same(a: jax.Array, b: jax.Array, values: bool = True) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.weak_type == b.weak_type and a.sharding == b.sharding
            and a.committed == b.committed and (not values or np.asarray(a).tobytes() == np.asarray(b).tobytes()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_buffers_are_torchs_on_jnps_devices(dtype):
    """Values as torch's ``zeros_like``/``full_like`` give them (a 16-bit fill converted through float, as
    torch's ``fill_`` converts it), for fill values drawn over twelve decades; dtype, shape, weak type,
    device and commitment as ``jnp.zeros_like`` / ``jnp.full_like`` give them."""
    tdtype = {jnp.float32: torch.float32, jnp.float64: torch.float64, jnp.float16: torch.float16,
              jnp.bfloat16: torch.bfloat16}[dtype]
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        values = [*(rng.random(200) * 10.0 ** rng.integers(-12, 3, 200)), 0.01, 1e-10, 1 / 3, 1 + 2**-11 + 2**-30]
        for p in (jnp.ones((3, 2), dtype), jax.device_put(jnp.ones((5,), dtype), jax.devices()[0])):
            assert _placed_same(_buffers.zeros_like(p), jnp.zeros_like(p))
            expected = jnp.zeros((2, 1), p.dtype)
            assert _placed_same(_buffers.zeros((2, 1), p.dtype, p),
                                jax.device_put(expected, p.devices().pop()) if p.committed else expected)
            for value in values:
                ours = _buffers.full_like(p, float(value))
                assert _placed_same(ours, jnp.full_like(p, float(value)), values=False)
                theirs = torch.full(p.shape, float(value), dtype=tdtype)
                np.testing.assert_array_equal(np.asarray(ours).astype(np.float64), theirs.double().numpy(),
                                              err_msg=str(value))


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
    assert weak.weak_type and _placed_same(_buffers.zeros_like(weak), jnp.zeros_like(weak))


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


def test_buffers_made_inside_a_trace_are_jnps():
    """Inside a trace (``init`` jitted or under ``eval_shape``, the parameters closed over) a buffer is a
    broadcast of the traced program, not a host array captured as a constant."""
    p = jnp.ones((300, 200))
    closed = jax.make_jaxpr(lambda: (_buffers.zeros_like(p), _buffers.full_like(p, 0.5),
                                     _buffers.zeros((300,), jnp.float32, p)))()
    assert all(np.size(c) <= 1 for c in closed.consts)
    assert jax.eval_shape(lambda: optim.adam(lr=1e-3).init({"w": p})).exp_avg["w"].shape == (300, 200)


def test_sparse_adams_row_flags_follow_a_sharded_parameter():
    """SparseAdam's per-row buffer (rank 1) beside a rank-2 parameter placed with a NamedSharding."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    for spec in (PartitionSpec("x", None), PartitionSpec(None, "x")):
        w = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, spec))
        leaves = jax.tree.leaves(optim.sparseadam(lr=1e-3).init({"w": w}))
        assert any(leaf.shape == (8,) and leaf.dtype == bool for leaf in leaves)
