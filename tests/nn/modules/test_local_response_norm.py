"""LocalResponseNorm and F.local_response_norm against torch: a seeded grid over 3-D to 6-D inputs, window
sizes 1 to beyond the channel count, and alpha/beta/k.

float64: forward and input gradient within 1e-12 of torch (measured at most 4.5e-16 relative over the
whole grid). float32: within 5e-7 relative (measured at most 1.3e-7 forward and 1.2e-7 gradient): jax_impl's avg_pool
divides its window sums by a constant, which XLA turns into a reciprocal multiplication (1 ULP off torch's
IEEE division in some outputs), XLA's ``pow`` for ``beta`` is not glibc's or SLEEF's, and autograd sums
the input's three gradient terms in another order."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jax_impl.nn as jnn
import jax_impl.nn.functional as F
from tests.nn.modules._torch_pair import rel_err

_TOL = {"float64": 1e-12, "float32": 5e-7}

# (input shape, size, alpha, beta, k)
_CASES = [
    ((2, 5, 7), 3, 1e-4, 0.75, 1.0),
    ((2, 6, 4, 3), 4, 0.5, 0.5, 2.0),
    ((1, 4, 3, 2, 2), 2, 1.0, 1.5, 0.5),
] + [pytest.param(*case, marks=pytest.mark.slow) for case in [
    ((3, 4, 5), 1, 0.1, 0.75, 1.0),
    ((2, 3, 6), 7, 2.0, 0.75, 1.0),
    ((2, 5, 3, 3), 5, 1e-2, 1.0, 1.0),
    ((2, 5, 3, 3), 2, 0.3, 2.0, 1.0),
    ((2, 6, 2, 3, 2, 2), 3, 0.2, 0.75, 1.0),
    ((1, 8, 4, 4), 6, 3.0, 0.25, 0.1),
]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("shape", "size", "alpha", "beta", "k"), _CASES, ids=[f"case{i}" for i in range(len(_CASES))])
def test_matches_torch(shape, size, alpha, beta, k, dtype):
    np_dtype = np.float64 if dtype == "float64" else np.float32
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        rng = np.random.default_rng(len(shape) * 10 + size)
        x = (rng.standard_normal(shape) * 2).astype(np_dtype)
        g = rng.standard_normal(shape).astype(np_dtype)
        t_x = torch.tensor(x, requires_grad=True)
        t_y = torch.nn.LocalResponseNorm(size, alpha, beta, k)(t_x)
        t_y.backward(torch.tensor(g))
        module = jnn.LocalResponseNorm(size, alpha, beta, k)

        # One compiled program for forward and backward (op by op, the pools compile dozens of kernels);
        # test_eager_equals_jit holds the eager path to the same numbers.
        @jax.jit
        def forward_and_grad(v, cotangent):
            y, vjp = jax.vjp(module, v)
            return y, vjp(cotangent)[0]

        y, grad = forward_and_grad(jnp.asarray(x), jnp.asarray(g))
        assert y.dtype == x.dtype
        assert rel_err(y, t_y.detach().numpy()) <= _TOL[dtype]
        assert rel_err(grad, t_x.grad.numpy()) <= _TOL[dtype]


def test_eager_equals_jit():
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 5, 4, 3)).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(F.local_response_norm(x, 3, 0.5, 0.75, 1.0)),
                                  np.asarray(jax.jit(jnn.LocalResponseNorm(3, 0.5, 0.75, 1.0))(x)))


def test_module_attributes_and_errors_are_torchs():
    theirs, ours = torch.nn.LocalResponseNorm(3, beta=0.5), jnn.LocalResponseNorm(3, beta=0.5)
    assert (ours.size, ours.alpha, ours.beta, ours.k) == (theirs.size, theirs.alpha, theirs.beta, theirs.k)
    assert F.local_response_norm(jnp.zeros((2, 0, 3)), 2).shape == (2, 0, 3)
    for shape, size in [((2, 3), 2), ((2, 3, 4), 0), ((2, 3, 4, 5), -1)]:
        with pytest.raises(Exception) as theirs_error:
            TF.local_response_norm(torch.zeros(shape), size)
        with pytest.raises(type(theirs_error.value)) as ours_error:
            F.local_response_norm(jnp.zeros(shape), size)
        assert str(ours_error.value) == str(theirs_error.value)


def test_ports():
    import parity.port

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.LocalResponseNorm(3, k=2.0))
    source = parity.port.port_source(model)
    assert "nn.LocalResponseNorm(3, k=2.0)" in source
