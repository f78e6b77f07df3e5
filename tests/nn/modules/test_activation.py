"""Activation modules against torch.nn: forward and input gradient, float32 and float64, kinks included.

Inputs mix standard normals with the points where torch's backward kernels
define the derivative by convention (0 for ReLU, the clamp bounds of
Hardtanh/ReLU6, +-3 for Hardsigmoid/Hardswish, the threshold of Threshold,
large |x| for Softplus's threshold). Measured: ReLU, ReLU6, Hardtanh,
LeakyReLU, Threshold, PReLU forward and gradients bit-identical; the
transcendental ones (ELU, SELU, CELU, GELU, SiLU, Mish, Softplus,
LogSigmoid, Sigmoid, Tanh) <= ~4e-7 float32 / ~5e-16 float64 relative
(libm vs XLA's polynomial approximations). Bars: issue #5's.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import jax_impl.nn as nn
from parity.layer_check import assert_within, compare_module

CASES = [
    ("ReLU", (), {}), ("ReLU6", (), {}), ("LeakyReLU", (0.2,), {}), ("ELU", (0.7,), {}), ("SELU", (), {}),
    ("CELU", (1.3,), {}), ("GELU", (), {}), ("GELU", (), {"approximate": "tanh"}), ("SiLU", (), {}),
    ("Mish", (), {}), ("Softplus", (), {}), ("Softplus", (2.0, 5.0), {}), ("Sigmoid", (), {}), ("Tanh", (), {}),
    ("Hardtanh", (-0.5, 2.0), {}), ("Hardsigmoid", (), {}), ("Hardswish", (), {}), ("LogSigmoid", (), {}),
    ("Softsign", (), {}), ("Tanhshrink", (), {}), ("Threshold", (0.1, -2.0), {}), ("Softmax", (1,), {}),
    ("LogSoftmax", (-1,), {}),
]
KINKS = [0.0, -0.0, 1.0, -1.0, 6.0, -0.5, 2.0, 3.0, -3.0, 0.1, 25.0, -25.0, 2.5, 1e-8]


def _input(rng, dtype):
    x = rng.standard_normal((3, 5, 4)) * 3
    flat = x.reshape(-1)
    flat[: len(KINKS)] = KINKS
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, args, kwargs", CASES, ids=[f"{c[0]}{c[1]}{c[2] or ''}" for c in CASES])
def test_activation_matches_torch(name, args, kwargs, dtype):
    with jax.enable_x64(dtype == np.float64):
        x = _input(np.random.default_rng(0), dtype)
        errors = compare_module(getattr(torch.nn, name)(*args, **kwargs), getattr(nn, name)(*args, **kwargs), x)
        assert_within(errors, dtype)
        if name in ("ReLU", "ReLU6", "Hardtanh", "LeakyReLU", "Threshold"):
            assert errors == {"forward": 0.0, "grad input": 0.0}, errors


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("num", [1, 5])
def test_prelu_matches_torch(dtype, num):
    with jax.enable_x64(dtype == np.float64):
        tdt = torch.float64 if dtype == np.float64 else torch.float32
        x = _input(np.random.default_rng(1), dtype)
        errors = compare_module(torch.nn.PReLU(num, 0.3, dtype=tdt), nn.PReLU(num, 0.3, dtype=jax.numpy.dtype(dtype)), x)
        assert_within(errors, dtype)


def test_relu_keeps_nan_like_torch():
    x = np.array([np.nan, -1.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(np.asarray(nn.ReLU()(x)), torch.relu(torch.tensor(x)).numpy())


def test_hardtanh_bad_bounds_raise_like_torch():
    with pytest.raises(AssertionError) as theirs:
        torch.nn.Hardtanh(1.0, -1.0)
    with pytest.raises(AssertionError) as ours:
        nn.Hardtanh(1.0, -1.0)
    assert str(ours.value) == str(theirs.value)


MASKED = [("ReLU", ()), ("ReLU6", ()), ("Hardtanh", (-0.5, 2.0)), ("Hardsigmoid", ()), ("Hardswish", ()),
          ("Threshold", (0.1, -2.0)), ("LeakyReLU", (0.2,))]


@pytest.mark.parametrize("name, args", MASKED, ids=[c[0] for c in MASKED])
def test_masked_gradient_sign_and_nan_match_torch_bitwise(name, args):
    # Gradients of both signs, zeros of both signs and NaN meet inputs in and out of the mask and
    # a NaN input: torch's backward kernels select (`masked ? 0 : g`), so a masked entry is +0
    # even for g = -3 or NaN, and a NaN input passes g where torch's comparison lets it through.
    # 64 elements, the special ones first: torch's vectorised loop takes them (its scalar loop,
    # for the tail, differs at a NaN input for Hardtanh, ReLU6 and Hardswish), the tail is plain.
    rng = np.random.default_rng(0)
    head = KINKS + [np.nan, -7.0, 7.0, -2.9, 2.9]
    x = np.concatenate([head, rng.standard_normal(64 - len(head)) + 0.5]).astype(np.float32)
    module = getattr(nn, name)(*args)
    # Jitted: the four cotangents share one compilation of the VJP (eagerly, each op compiles on its own).
    grad_input = jax.jit(lambda v, g: jax.vjp(module, v)[1](g)[0])
    for g in (np.full_like(x, -3.0), np.full_like(x, -0.0), np.full_like(x, np.nan), rng.standard_normal(x.shape).astype(np.float32)):
        tx = torch.tensor(x, requires_grad=True)
        getattr(torch.nn, name)(*args)(tx).backward(torch.tensor(g))
        gx = np.asarray(grad_input(jax.numpy.asarray(x), jax.numpy.asarray(g)))
        want = tx.grad.numpy()
        # Hardswish's unmasked g * (x / 3 + 0.5): torch's vectorised loop rounds differently,
        # measured 1.6e-7 relative (1 ulp); every other entry, and all of the others, bit for bit.
        np.testing.assert_allclose(gx, want, rtol=2.4e-7 if name == "Hardswish" else 0, atol=0)
        np.testing.assert_array_equal(np.signbit(gx), np.signbit(want))


@pytest.mark.parametrize("shape", [(), (1,), (4,), (2, 3)])
def test_prelu_keeps_input_shape_like_torch(shape):
    x = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape).astype(np.float32)
    expected = torch.nn.PReLU()(torch.tensor(x)).detach().numpy()
    out = nn.PReLU()(x)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, args", [("ELU", (0.7,)), ("SELU", ()), ("CELU", (1.3,))])
def test_elu_family_gradient_matches_torch_elementwise_far_below_zero(name, args, dtype):
    """torch's ``elu_backward`` takes ``exp(x)``; ``expm1(x) + 1`` would cancel (2e-4 relative at x = -9 in
    float32). Every element within 2 ULP of torch's (measured 2 ULP: the product's order), NaN kept."""
    with jax.enable_x64(dtype == np.float64):
        x = np.concatenate([np.linspace(-40.0, 2.0, 2001), [0.0, -0.0, np.nan]]).astype(dtype)
        t_x = torch.tensor(x, requires_grad=True)
        getattr(torch.nn, name)(*args)(t_x).sum().backward()
        # Jitted: one compilation of the gradient (eagerly, each op compiles on its own).
        ours = np.asarray(jax.jit(jax.grad(lambda a: getattr(nn, name)(*args)(a).sum()))(jax.numpy.asarray(x)))
        theirs = t_x.grad.numpy()
        assert np.array_equal(np.isnan(ours), np.isnan(theirs))
        ok = ~np.isnan(theirs)
        assert np.all(np.abs(ours[ok] - theirs[ok]) <= 2 * np.spacing(np.abs(theirs[ok])))
