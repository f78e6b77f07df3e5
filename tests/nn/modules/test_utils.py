"""jax_impl/nn/modules/_utils.py: a layer's constant initial state, filled on the host, is torch's and compiles
nothing."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn
from jax_impl.nn import init


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
