"""LayerNorm, GroupNorm and RMSNorm against torch.nn: init, forward and input gradients.

Measured over these draws: float64 forward and input gradients <= ~1e-15
relative to the largest magnitude (bar 1e-10); float32 <= ~1e-6 (bar 1e-5;
the mean/variance reductions sum in another order than aten's kernels).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
from tests.nn.modules._torch_pair import input_grad, load_state, max_state_diff, rel_err, torch_input_grad

TOL = {np.float64: 1e-10, np.float32: 1e-5}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def _default_first(values):
    """The first value runs in the default tier, the rest in the slow tier (the default tier's time budget)."""
    return [v if i == 0 else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]


def _jitted_input_grad(module, x):
    """:func:`input_grad` of ``module`` as one compiled function (nnx split / merge)."""
    graph, state = nnx.split(module)
    return jax.jit(lambda s, a: input_grad(nnx.merge(graph, s), a))(state, x)


def _check(t_mod, j_mod, x, dtype, jit=False):
    t_mod.weight is not None and torch.nn.init.normal_(t_mod.weight)  # non-trivial affine parameters
    getattr(t_mod, "bias", None) is not None and torch.nn.init.normal_(t_mod.bias)
    load_state(j_mod, t_mod)
    out, grads = (_jitted_input_grad if jit else input_grad)(j_mod, jnp.asarray(x))
    t_out, t_grads = torch_input_grad(t_mod, x)
    assert rel_err(out, t_out) <= TOL[dtype]
    assert rel_err(grads[0], t_grads[0]) <= TOL[dtype]


CASES = [
    ("layer", (4, 6), 6, dict()),
    ("layer", (2, 3, 4, 5), (4, 5), dict(eps=1e-3)),
    ("layer", (3, 7), 7, dict(bias=False)),
    ("layer", (3, 7), 7, dict(elementwise_affine=False)),
    ("group", (2, 6, 5), (3, 6), dict()),
    ("group", (3, 4, 2, 3), (4, 4), dict(affine=False, eps=1e-2)),
    ("group", (2, 6), (1, 6), dict()),
    ("group", (2, 6, 5), (3, 6), dict(bias=False)),
    ("rms", (4, 6), 6, dict()),
    ("rms", (2, 3, 4), (3, 4), dict(eps=1e-3)),
    ("rms", (5, 3), 3, dict(elementwise_affine=False)),
]
# The default tier runs each layer's first case (its time budget); the slow tier runs them all.
CASES = [case if case[0] not in [c[0] for c in CASES[:i]] else pytest.param(*case, marks=pytest.mark.slow)
         for i, case in enumerate(CASES)]


def _pair(kind, shape_arg, kwargs, dtype):
    td, jd = TORCH_DTYPE[dtype], jnp.dtype(dtype)
    if kind == "layer":
        return torch.nn.LayerNorm(shape_arg, dtype=td, **kwargs), nn.LayerNorm(shape_arg, dtype=jd, **kwargs)
    if kind == "group":
        return torch.nn.GroupNorm(*shape_arg, dtype=td, **kwargs), nn.GroupNorm(*shape_arg, dtype=jd, **kwargs)
    return torch.nn.RMSNorm(shape_arg, dtype=td, **kwargs), nn.RMSNorm(shape_arg, dtype=jd, **kwargs)


@pytest.mark.parametrize("dtype", _default_first([np.float64, np.float32]))
@pytest.mark.parametrize("kind,x_shape,shape_arg,kwargs", CASES)
def test_norm_layers_match_torch(dtype, kind, x_shape, shape_arg, kwargs):
    with jax.enable_x64(dtype == np.float64):
        t_mod, j_mod = _pair(kind, shape_arg, kwargs, dtype)
        assert max_state_diff(j_mod, t_mod) == 0  # ones / zeros, same keys and shapes
        x = (np.random.default_rng(len(x_shape)).standard_normal(x_shape) * 3 + 1).astype(dtype)
        _check(t_mod, j_mod, x, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_norm_layers_wide_grid_float64(seed):
    """Random shapes, groups and affine flags in float64, each check jitted.

    Every draw has new shapes: eagerly, each of the forward and backward ops compiles on its own
    for each (~1 s a check); one jit compile per check is a fifth of that. The eager path is
    ``test_norm_layers_match_torch``'s.
    """
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        for kind, affine in itertools.product(("layer", "group", "rms"), (True, False)):
            # At least 3 elements per normalised group: over 2 the output is +-1 and its input gradient
            # is pure cancellation (~1e-7 of its terms), which no relative bar measures meaningfully.
            n, c = (int(v) for v in rng.integers(1, 6, 2))
            s = int(rng.integers(3, 7))
            groups = int(rng.choice([g for g in range(1, 2 * c + 1) if (2 * c) % g == 0]))
            if kind == "group":
                t_mod, j_mod = _pair(kind, (groups, 2 * c), dict(affine=affine), np.float64)
                x_shape = (n + 1, 2 * c, s)
            else:
                t_mod, j_mod = _pair(kind, (c, s), dict(elementwise_affine=affine), np.float64)
                x_shape = (n, c, s)
            _check(t_mod, j_mod, rng.standard_normal(x_shape) * 10, np.float64, jit=True)


def test_group_norm_rejects_indivisible_channels():
    with pytest.raises(ValueError) as theirs:
        torch.nn.GroupNorm(4, 6)
    with pytest.raises(ValueError) as mine:
        nn.GroupNorm(4, 6)
    assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_bias_false_matches_torch(affine):
    """torch's keyword-only ``bias``: no bias parameter (state-dict keys as torch's), the same numbers."""
    with jax.enable_x64(True):
        t_mod, j_mod = _pair("group", (2, 6), dict(affine=affine, bias=False), np.float64)
        assert t_mod.bias is None and j_mod.bias is None
        assert (t_mod.weight is None) == (j_mod.weight is None)
        assert max_state_diff(j_mod, t_mod) == 0
        x = np.random.default_rng(7).standard_normal((3, 6, 4)) * 3 + 1
        _check(t_mod, j_mod, x, np.float64)
