"""Bilinear and F.bilinear against torch: torch's initial weights from the same seed (bit for bit, generator
state included), and a seeded grid of shapes (unbatched, batched, extra leading dimensions, an empty batch)
with and without bias.

float64: forward and the gradients of both inputs, the weight and the bias within 1e-12 of torch (measured
at most 3.9e-16 relative over the whole grid). float32: within 1e-6 relative (measured at most 1.0e-7 forward
and 1.8e-7 gradient): torch sums each of the two products in MKL's blocked order, XLA in Eigen's."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from flax import nnx

import jax_impl.nn as jnn
import jax_impl.nn.functional as F
import jax_impl.random as jr
from tests.nn.modules._torch_pair import rel_err

_TOL = {"float64": 1e-12, "float32": 1e-6}
_DTYPES = {"float64": (np.float64, torch.float64), "float32": (np.float32, torch.float32)}


@pytest.mark.parametrize("dtype", list(_DTYPES))
@pytest.mark.parametrize("bias", [True, False])
def test_init_draws_torchs_numbers(bias, dtype):
    np_dtype, t_dtype = _DTYPES[dtype]
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        torch.manual_seed(4)
        jr.manual_seed(4)
        theirs = torch.nn.Bilinear(5, 3, 4, bias=bias, dtype=t_dtype)
        ours = jnn.Bilinear(5, 3, 4, bias=bias, dtype=np_dtype)
        for key, value in theirs.state_dict().items():
            np.testing.assert_array_equal(np.asarray(getattr(ours, key)[...]), value.numpy())
        assert (ours.bias is None) == (theirs.bias is None)
        assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def test_init_from_a_jax_key_keeps_torchs_bounds():
    layer = jnn.Bilinear(4, 3, 5, rngs=nnx.Rngs(0))
    assert layer.weight[...].shape == (5, 4, 3) and layer.bias[...].shape == (5,)
    assert float(jnp.max(jnp.abs(layer.weight[...]))) <= 0.5 and float(jnp.max(jnp.abs(layer.bias[...]))) <= 0.5
    with pytest.raises(ValueError, match=r"in1_features must be > 0, but got \(in1_features=0\)"):
        jnn.Bilinear(0, 3, 4)


# (input1 shape, input2 shape, out_features, bias)
_CASES = [
    ((3, 4), (3, 5), 6, True),
    ((2, 7, 4), (2, 7, 3), 2, False),
    ((4,), (2,), 3, True),
] + [pytest.param(*case, marks=pytest.mark.slow) for case in [
    ((0, 3), (0, 4), 5, True),
    ((5, 1), (5, 6), 4, True),
    ((2, 3, 2, 8), (2, 3, 2, 5), 7, True),
    ((16, 9), (16, 11), 13, False),
    ((1, 1), (1, 1), 1, True),
]]


@pytest.mark.parametrize("dtype", list(_DTYPES))
@pytest.mark.parametrize(("shape1", "shape2", "out", "bias"), _CASES, ids=[f"case{i}" for i in range(len(_CASES))])
def test_matches_torch(shape1, shape2, out, bias, dtype):
    np_dtype = _DTYPES[dtype][0]
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        rng = np.random.default_rng(len(shape1) * 100 + out)
        x1, x2 = rng.standard_normal(shape1).astype(np_dtype), rng.standard_normal(shape2).astype(np_dtype)
        w = rng.standard_normal((out, shape1[-1], shape2[-1])).astype(np_dtype)
        b = rng.standard_normal(out).astype(np_dtype) if bias else None
        arrays = [x1, x2, w] + ([b] if bias else [])
        t_arrays = [torch.tensor(a, requires_grad=True) for a in arrays]
        t_y = TF.bilinear(*t_arrays)
        g = rng.standard_normal(tuple(t_y.shape)).astype(np_dtype)
        t_y.backward(torch.tensor(g))
        # One compiled program for forward and backward; test_module_calls_the_functional runs it eagerly.
        y, grads = jax.jit(lambda g, *a: (lambda y, vjp: (y, vjp(g)))(*jax.vjp(F.bilinear, *a)))(
            jnp.asarray(g), *map(jnp.asarray, arrays))
        assert y.shape == tuple(t_y.shape) and y.dtype == np_dtype
        assert rel_err(y, t_y.detach().numpy()) <= _TOL[dtype]
        for mine, theirs in zip(grads, t_arrays):
            assert rel_err(mine, theirs.grad.numpy()) <= _TOL[dtype]


def test_module_calls_the_functional():
    torch.manual_seed(0)
    jr.manual_seed(0)
    theirs, ours = torch.nn.Bilinear(3, 2, 4), jnn.Bilinear(3, 2, 4)
    x1, x2 = np.ones((2, 3), np.float32), np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_allclose(np.asarray(ours(jnp.asarray(x1), jnp.asarray(x2))),
                               theirs(torch.tensor(x1), torch.tensor(x2)).detach().numpy(), rtol=1e-6, atol=1e-7)
    assert (ours.in1_features, ours.in2_features, ours.out_features) == (3, 2, 4)


_ERRORS = [
    ((2, 3), (2, 4), (5, 3, 4), (5,), "float64"),
    ((2, 3), (2, 4, 1), (5, 3, 4), None, None),
    ((2, 3), (3, 4), (5, 3, 4), None, None),
    ((2, 3), (2, 4), (5, 2, 4), None, None),
    ((2, 3), (2, 4), (5, 3, 3), None, None),
    ((2, 3), (2, 4), (5, 3, 4), (4,), None),
]


@pytest.mark.parametrize(("s1", "s2", "sw", "sb", "bias_dtype"), _ERRORS, ids=[str(i) for i in range(len(_ERRORS))])
def test_errors_are_torchs(s1, s2, sw, sb, bias_dtype):
    with jax.enable_x64(True):
        arrays = [np.zeros(s, np.float32) for s in (s1, s2, sw)] + ([np.zeros(sb, bias_dtype or np.float32)]
                                                                     if sb else [])
        with pytest.raises(RuntimeError) as theirs:
            TF.bilinear(*map(torch.tensor, arrays))
        with pytest.raises(RuntimeError) as ours:
            F.bilinear(*map(jnp.asarray, arrays))
        assert str(ours.value) == str(theirs.value)


class _TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bilinear = torch.nn.Bilinear(3, 4, 5, bias=False)

    def forward(self, a, b):
        return self.bilinear(a, b)


def test_ports():
    import parity.port

    assert "nn.Bilinear(3, 4, 5, bias=False)" in parity.port.port_source(_TwoInputs())
