"""LPPool1d/2d/3d and F.lp_pool1d/2d/3d against torch: a seeded grid over norm types (1, 2, 3, 4, 1.5, inf,
-inf), kernels, strides and ceil_mode, with windows whose power sum is zero (gradient 0, as torch).

float64: forward and input gradient within 1e-12 of torch (measured at most 2.7e-16 relative over the
whole grid). float32: within 5e-7 relative (measured at most 1.2e-7 forward and 1.1e-7 gradient): jax_impl's
avg_pool divides by its constant divisor through XLA's reciprocal multiplication (1 ULP off torch's IEEE
division in about one output in six), and ``pow`` for a non-special exponent is XLA's, not glibc's or
SLEEF's."""

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


def _check(nd, x, p, kernel, stride, ceil, dtype):
    """torch's and jax_impl's module: forward and input gradient within the dtype's bound.

    Forward and backward run as one compiled program (op by op, the pools compile dozens of kernels);
    :func:`test_eager_equals_jit` holds the eager path to the same numbers.
    """
    t_x = torch.tensor(x, requires_grad=True)
    t_y = getattr(TF, f"lp_pool{nd}d")(t_x, p, kernel, stride, ceil)
    g = np.random.default_rng(7).standard_normal(tuple(t_y.shape)).astype(x.dtype)
    t_y.backward(torch.tensor(g))
    module = getattr(jnn, f"LPPool{nd}d")(p, kernel, stride, ceil)

    @jax.jit
    def forward_and_grad(v, cotangent):
        y, vjp = jax.vjp(module, v)
        return y, vjp(cotangent)[0]

    y, grad = forward_and_grad(jnp.asarray(x), jnp.asarray(g))
    assert y.dtype == x.dtype and y.shape == tuple(t_y.shape)
    assert rel_err(y, t_y.detach().numpy()) <= _TOL[dtype]
    assert rel_err(grad, t_x.grad.numpy()) <= _TOL[dtype]


def _input(rng, shape, p, kernel, np_dtype):
    x = rng.standard_normal(shape)
    if not float(p).is_integer():
        x = np.abs(x)  # torch's pow gives NaN on negative bases there, so would ours
    x[(0,) * (x.ndim - len(kernel)) + tuple(slice(0, k) for k in kernel)] = 0  # a window of zeros
    return x.astype(np_dtype)


# (nd, input shape, norm_type, kernel_size, stride, ceil_mode)
_CASES = [
    (2, (2, 3, 9, 8), 2, 3, 2, True),
    (1, (3, 10), 3, 3, None, False),
    (3, (1, 2, 5, 6, 5), 1.5, (2, 3, 2), (1, 2, 2), True),
    (1, (2, 2, 9), float("-inf"), 3, 2, True),
] + [pytest.param(*case, marks=pytest.mark.slow) for case in [
    (1, (2, 3, 11), 1, 4, 3, True),
    (1, (2, 2, 9), 4, 2, 1, False),
    (2, (3, 7, 7), 1, (2, 3), None, False),
    (2, (2, 2, 8, 9), 4.0, (3, 2), (2, 1), True),
    (2, (2, 2, 8, 9), 2.5, 2, 2, False),
    (2, (1, 3, 6, 6), float("inf"), 3, 2, True),
    (3, (2, 2, 5, 4, 6), 2, 2, None, False),
    (3, (2, 5, 5, 5), 3, 3, 2, True),
    (3, (1, 2, 4, 5, 6), float("-inf"), 2, 1, False),
]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("nd", "shape", "p", "kernel", "stride", "ceil"), _CASES,
                         ids=[f"case{i}" for i in range(len(_CASES))])
def test_matches_torch(nd, shape, p, kernel, stride, ceil, dtype):
    np_dtype = np.float64 if dtype == "float64" else np.float32
    with jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext():
        rng = np.random.default_rng(len(shape) * 10 + nd)
        kernel_t = tuple(kernel) if isinstance(kernel, tuple) else (kernel,) * nd
        _check(nd, _input(rng, shape, p, kernel_t, np_dtype), p, kernel, stride, ceil, dtype)


def test_zero_power_sum_has_zero_gradient():
    with jax.enable_x64(True):
        x = np.zeros((1, 1, 4, 4))
        x[0, 0, 2:, 2:] = [[1.0, -2.0], [0.5, 3.0]]
        grad = jax.jit(jax.grad(lambda v: jnp.sum(F.lp_pool2d(v, 2, 2))))(jnp.asarray(x))
        t_x = torch.tensor(x, requires_grad=True)
        TF.lp_pool2d(t_x, 2, 2).sum().backward()
        assert np.all(np.asarray(grad)[0, 0, :2, :2] == 0)
        np.testing.assert_allclose(np.asarray(grad), t_x.grad.numpy(), rtol=0, atol=1e-15)


def test_eager_equals_jit():
    x = jnp.asarray(np.abs(np.random.default_rng(1).standard_normal((2, 3, 8, 8))).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(F.lp_pool2d(x, 1.5, 3, 2)),
                                  np.asarray(jax.jit(jnn.LPPool2d(1.5, 3, 2))(x)))


def test_module_attributes_and_errors_are_torchs():
    theirs, ours = torch.nn.LPPool2d(2, 3), jnn.LPPool2d(2, 3)
    assert (ours.norm_type, ours.kernel_size, ours.stride, ours.ceil_mode) == \
        (theirs.norm_type, theirs.kernel_size, theirs.stride, theirs.ceil_mode)
    with pytest.raises(ZeroDivisionError, match="float division by zero"):
        jax.jit(lambda v: F.lp_pool2d(v, 0, 2))(jnp.ones((1, 2, 4, 4)))
    with pytest.raises(TypeError) as theirs_error:
        TF.lp_pool1d(torch.ones(1, 2, 6), 2, (3,))
    with pytest.raises(TypeError) as ours_error:
        jax.jit(lambda v: F.lp_pool1d(v, 2, (3,)))(jnp.ones((1, 2, 6)))
    assert str(ours_error.value) == str(theirs_error.value)


def test_ports():
    import parity.port

    source = parity.port.port_source(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.LPPool2d(2, 2),
                                                         torch.nn.LPPool2d(1.5, (2, 3), stride=1, ceil_mode=True)))
    assert "nn.LPPool2d(2, 2)" in source and "nn.LPPool2d(1.5, (2, 3), stride=1, ceil_mode=True)" in source
