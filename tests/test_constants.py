"""jax_impl/_constants.py and jax_impl/_tracing.py: constants filled on the host outside a trace, torch's fill
conversion, and ``jnp.full`` inside a trace."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as jnn
from jax_impl import _constants
from jax_impl._tracing import tracing
from jax_impl.nn import init


def test_tracing_is_true_where_values_are_staged():
    seen = {}
    jax.jit(lambda x: seen.setdefault("jit", tracing()) or x)(1.0)
    jax.eval_shape(lambda: seen.setdefault("eval_shape", tracing()))
    jax.grad(lambda x: seen.setdefault("grad", tracing()) or x)(1.0)  # evaluated eagerly: values are computed
    assert (tracing(), seen) == (False, {"jit": True, "eval_shape": True, "grad": False})


@pytest.mark.parametrize("dtype, tdtype", [(jnp.float32, torch.float32), (jnp.float16, torch.float16),
                                           (jnp.bfloat16, torch.bfloat16)])
def test_fill_values_convert_as_torchs(dtype, tdtype):
    """A Python float goes to a 16-bit type through float, as torch's ``fill_`` converts it (a direct
    conversion of the double rounds some values the other way), for fills drawn over twelve decades."""
    rng = np.random.default_rng(1)
    for value in [*(rng.random(300) * 10.0 ** rng.integers(-10, 3, 300)), 1 + 2**-11 + 2**-30, 0.1, 1 / 3]:
        ours = np.asarray(_constants.full((2,), float(value), dtype)).astype(np.float64)
        np.testing.assert_array_equal(ours, torch.full((2,), float(value), dtype=tdtype).double().numpy(),
                                      err_msg=str(value))


def test_inside_a_trace_constants_are_broadcasts_not_captured_arrays():
    """``nnx.eval_shape`` of a model and a jitted init keep their constants abstract: a broadcast in the
    traced program, never a host array of the full size captured as a constant."""
    closed = jax.make_jaxpr(lambda: (init.zeros_(None, (3000, 2000)), _constants.full((500,), 0.25, jnp.float32)))()
    assert all(np.size(c) <= 1 for c in closed.consts)
    model = nnx.eval_shape(lambda: jnn.BatchNorm2d(4096))
    assert model.running_var.get_value().shape == (4096,)


def test_traced_fill_values_take_jnp():
    out = jax.jit(lambda v: _constants.full((3,), v, jnp.float32))(jnp.float32(2.5))
    np.testing.assert_array_equal(np.asarray(out), [2.5, 2.5, 2.5])


def _state(module) -> dict[str, np.ndarray]:
    return {name: np.asarray(getattr(module, name)[...]) for name in
            ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
            if getattr(module, name, None) is not None}


@pytest.mark.parametrize("dtype", [None, jnp.float64, jnp.bfloat16])
def test_norm_layers_start_from_torchs_state_without_compiling(dtype, caplog):
    """BatchNorm, InstanceNorm, LayerNorm, GroupNorm and PReLU of widths never built before (``jnp.ones`` of a
    new shape would compile), and ``nn.init.constant_``: torch's initial values and dtypes (``state_dict``),
    and no computation compiled to make them."""
    tdtype = {None: torch.float32, jnp.float64: torch.float64, jnp.bfloat16: torch.bfloat16}[dtype]
    w = 101 + 10 * [None, jnp.float64, jnp.bfloat16].index(dtype)  # widths of this case only
    with jax.enable_x64(dtype == jnp.float64):
        with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
            pairs = [(jnn.BatchNorm2d(w, dtype=dtype), torch.nn.BatchNorm2d(w, dtype=tdtype)),
                     (jnn.InstanceNorm1d(w + 1, affine=True, track_running_stats=True, dtype=dtype),
                      torch.nn.InstanceNorm1d(w + 1, affine=True, track_running_stats=True, dtype=tdtype)),
                     (jnn.LayerNorm((3, w + 2), dtype=dtype), torch.nn.LayerNorm((3, w + 2), dtype=tdtype)),
                     (jnn.GroupNorm(1, w + 3, dtype=dtype), torch.nn.GroupNorm(1, w + 3, dtype=tdtype)),
                     (jnn.PReLU(w + 4, init=0.3, dtype=dtype), torch.nn.PReLU(w + 4, init=0.3, dtype=tdtype))]
            constant = init.constant_(None, (2, w + 5), jnp.float32 if dtype is None else dtype, 0.7)
        compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
        assert not compiled, compiled
        for ours, theirs in pairs:
            got, expected = _state(ours), theirs.state_dict()
            assert list(got) == list(expected)
            for name, value in got.items():
                want = expected[name]
                assert value.shape == tuple(want.shape), name
                if name == "num_batches_tracked":
                    assert value.dtype == (np.int64 if jax.config.jax_enable_x64 else np.int32) and value == 0
                    continue
                assert value.dtype == jnp.dtype(dtype or jnp.float32), name
                np.testing.assert_array_equal(value.astype(np.float64), want.double().numpy(), err_msg=name)
        assert constant.dtype == jnp.dtype(dtype or jnp.float32)
        np.testing.assert_array_equal(np.asarray(constant, np.float64),
                                      torch.full((2, w + 5), 0.7, dtype=tdtype).double().numpy())
