"""LazyConv{1,2,3}d and LazyConvTranspose{1,2,3}d against torch.nn's lazy modules.

After the same seed both draw nothing at construction and torch's init numbers
at the first call: the materialised weights are bit-identical, both modules
become the eager class (torch's ``cls_to_become``), and the global streams stay
in step. Forward and gradients are then compared at parity.layer_check's bars
(the eager ConvNd's; tests/nn/modules/test_conv.py measures them).
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
import jax_impl.random
from parity.build import cast_jax_model
from parity.convert import load_torch_state_dict, module_state
from parity.layer_check import assert_within, compare_module
from parity.port.errors import PortError
from parity.port.layers import layer_source
from tests.nn.modules._torch_pair import seed_both

# (class name, constructor arguments, input shape): every class, with and without bias, groups,
# strides, 'same' padding, a non-zeros padding mode and unbatched input among them.
CASES = [
    ("LazyConv1d", (4, 3), dict(), (2, 3, 7)),
    ("LazyConv1d", (6, 2), dict(groups=3, bias=False, padding_mode="reflect", padding=1), (6, 5)),
    ("LazyConv2d", (5, (2, 3)), dict(stride=2, dilation=(1, 2)), (2, 2, 6, 7)),
    ("LazyConv2d", (4, 3), dict(padding="same", groups=2, padding_mode="circular"), (1, 4, 5, 5)),
    ("LazyConv3d", (3, 2), dict(bias=False), (1, 2, 3, 4, 3)),
    ("LazyConvTranspose1d", (4, 3), dict(stride=2, output_padding=1), (2, 3, 5)),
    ("LazyConvTranspose2d", (6, 2), dict(groups=2, bias=False, dilation=2), (4, 3, 3)),
    ("LazyConvTranspose3d", (2, (1, 2, 2)), dict(stride=(1, 2, 1), padding=(0, 1, 0)), (1, 2, 2, 3, 2)),
]
# The default tier runs one Conv and one ConvTranspose case (its time budget); the slow tier runs them all.
CASES = [case if i in (0, 5) else pytest.param(*case, marks=pytest.mark.slow) for i, case in enumerate(CASES)]
DTYPES = {np.float32: (torch.float32, jnp.float32), np.float64: (torch.float64, jnp.float64)}


def _materialised_pair(name, args, kwargs, shape, dtype, seed):
    td, jd = DTYPES[dtype]
    seed_both(seed)
    t_mod = getattr(torch.nn, name)(*args, **kwargs, dtype=td)
    j_mod = getattr(nn, name)(*args, **kwargs, dtype=jd)
    assert j_mod.has_uninitialized_params() and j_mod.in_channels == 0 and j_mod.out_channels == args[0]
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    t_mod(torch.tensor(x))
    j_mod(jnp.asarray(x))
    return t_mod, j_mod, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,args,kwargs,shape", CASES)
def test_first_call_materialises_torch_init_then_matches_torch(name, args, kwargs, shape, dtype):
    with jax.enable_x64(dtype == np.float64):
        t_mod, j_mod, x = _materialised_pair(name, args, kwargs, shape, dtype, seed=len(shape) + args[0])
        assert type(j_mod).__name__ == type(t_mod).__name__ == name.removeprefix("Lazy")
        assert j_mod.in_channels == t_mod.in_channels
        state = {k: np.asarray(v[...]) for k, v in module_state(j_mod).items()}
        assert sorted(state) == sorted(t_mod.state_dict())
        for key, value in t_mod.state_dict().items():
            assert state[key].dtype == value.numpy().dtype
            np.testing.assert_array_equal(state[key], value.numpy(), err_msg=f"torch's init numbers for {key}")
        # The streams advanced by the same draws.
        assert float(torch.rand(())) == float(jax_impl.random.rand(()))
        assert_within(compare_module(t_mod, j_mod, x, seed=3), dtype)


def test_construction_draws_nothing_and_state_holds_placeholders():
    seed_both(5)
    t_mod, j_mod = torch.nn.LazyConv2d(3, 2, bias=False), nn.LazyConv2d(3, 2, bias=False)
    assert list(module_state(j_mod)) == list(t_mod.state_dict()) == ["weight"]
    assert isinstance(j_mod.weight, nn.UninitializedParameter) and j_mod.weight.get_value().shape == (0,)
    assert float(torch.rand(())) == float(jax_impl.random.rand(()))  # neither drew anything
    assert sorted(module_state(nn.LazyConvTranspose1d(2, 2))) == sorted(torch.nn.LazyConvTranspose1d(2, 2).state_dict())


def test_cast_before_first_call_materialises_in_that_dtype():
    """torch's ``lazy.to(torch.float64)`` before the dry run; here the placeholders are cast."""
    with jax.enable_x64(True):
        seed_both(11)
        t_mod, j_mod = torch.nn.LazyConv1d(4, 3).to(torch.float64), nn.LazyConv1d(4, 3)
        cast_jax_model(j_mod, jnp.float64)
        x = np.random.default_rng(0).standard_normal((2, 2, 6))
        t_mod(torch.tensor(x))
        j_mod(jnp.asarray(x))
        assert j_mod.weight[...].dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(j_mod.weight[...]), t_mod.weight.detach().numpy())
        np.testing.assert_array_equal(np.asarray(j_mod.bias[...]), t_mod.bias.detach().numpy())


def test_first_call_inside_nnx_jit_materialises_the_callers_module():
    seed_both(2)
    t_mod, j_mod = torch.nn.LazyConv2d(3, 2), nn.LazyConv2d(3, 2)
    x = np.random.default_rng(1).standard_normal((2, 4, 5, 5)).astype(np.float32)
    call = nnx.jit(lambda m, x: m(x))
    out = call(j_mod, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), t_mod(torch.tensor(x)).detach().numpy(), rtol=0, atol=1e-5)
    # The traced call keeps the node type nnx expects; the next eager call makes it a Conv2d.
    assert not j_mod.has_uninitialized_params() and j_mod.in_channels == 4
    np.testing.assert_array_equal(np.asarray(j_mod.weight[...]), t_mod.weight.detach().numpy())
    np.testing.assert_array_equal(np.asarray(call(j_mod, jnp.asarray(x))), np.asarray(out))
    j_mod(jnp.asarray(x))
    assert type(j_mod) is nn.Conv2d


def test_rngs_draw_jax_keys_not_torch_stream():
    seed_both(4)
    a, b = nn.LazyConv1d(2, 3, rngs=nnx.Rngs(0)), nn.LazyConv1d(2, 3, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 3, 4))
    a(x), b(x)
    np.testing.assert_array_equal(np.asarray(a.weight[...]), np.asarray(b.weight[...]))
    assert a.weight[...].shape == (2, 3, 3)
    assert float(torch.rand(())) == float(jax_impl.random.rand(()))  # torch's stream untouched


def _same_error(run_torch, run_jax, exc):
    with pytest.raises(exc) as theirs:
        run_torch()
    with pytest.raises(exc) as mine:
        run_jax()
    assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("name,ndim", list(itertools.product(["LazyConv2d", "LazyConvTranspose2d"], [2, 5])))
def test_wrong_input_rank_raises_like_torch(name, ndim):
    x = np.ones((2,) * ndim, np.float32)
    _same_error(lambda: getattr(torch.nn, name)(2, 2)(torch.tensor(x)),
                lambda: getattr(nn, name)(2, 2)(jnp.asarray(x)), RuntimeError)


def test_in_channels_not_divisible_by_groups_raises_like_torch():
    x = np.ones((1, 3, 5), np.float32)
    _same_error(lambda: torch.nn.LazyConv1d(4, 2, groups=2)(torch.tensor(x)),
                lambda: nn.LazyConv1d(4, 2, groups=2)(jnp.asarray(x)), ValueError)
    _same_error(lambda: torch.nn.LazyConv1d(4, 2, groups=0), lambda: nn.LazyConv1d(4, 2, groups=0), ValueError)


def test_port_maps_a_materialised_torch_lazy_layer_to_the_eager_class():
    t_mod = torch.nn.LazyConvTranspose2d(3, 2, stride=2, bias=False)
    with pytest.raises(PortError, match="not materialised yet; call the torch model once"):
        layer_source(t_mod, "up")
    t_mod(torch.ones(1, 4, 3, 3))
    source = layer_source(t_mod, "up")
    assert source == "nn.ConvTranspose2d(4, 3, (2, 2), stride=(2, 2), bias=False)"
    twin = eval(source, {"nn": nn})
    load_torch_state_dict(twin, t_mod.state_dict())
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(twin(jnp.asarray(x))), t_mod(torch.tensor(x)).detach().numpy(),
                               rtol=0, atol=1e-6)
