"""Padding modules and PixelShuffle/PixelUnshuffle against torch: forward bit for bit, gradients within 1e-12
in float64 (reflect/replicate/circular gradients add several output positions into one input element;
measured 0 to 4.4e-16, the order of those sums)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn

_CASES = [
    ("ReflectionPad1d", (2,), (2, 3, 6)), ("ReflectionPad2d", ((1, 2, 0, 3),), (2, 2, 5, 6)),
    ("ReflectionPad3d", (1,), (1, 2, 3, 4, 4)), ("ReplicationPad1d", ((3, 1),), (2, 6)),
    ("ReplicationPad2d", (2,), (1, 3, 4, 4)), ("ReplicationPad3d", ((1, 0, 2, 1, 0, 1),), (1, 1, 3, 3, 3)),
    ("ZeroPad1d", ((1, 2),), (2, 3, 4)), ("ZeroPad2d", ((1, 0, -1, 2),), (1, 2, 4, 5)),
    ("ZeroPad3d", (1,), (1, 2, 2, 2, 2)), ("ConstantPad1d", (2, 3.5), (2, 3, 4)),
    ("ConstantPad2d", ((0, 1, 2, 0), -1.0), (2, 4, 4)), ("ConstantPad3d", (1, 0.25), (1, 1, 2, 3, 2)),
    ("CircularPad1d", (2,), (1, 2, 5)), ("CircularPad2d", ((1, 2, 2, 1),), (1, 2, 4, 4)),
    ("CircularPad3d", (1,), (1, 1, 3, 3, 3)),
    ("PixelShuffle", (2,), (2, 8, 3, 4)), ("PixelShuffle", (3,), (9, 2, 2)),
    ("PixelUnshuffle", (2,), (2, 3, 4, 6)), ("PixelUnshuffle", (3,), (1, 2, 2, 6, 3)),
]


@pytest.mark.parametrize(("name", "args", "shape"), _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_matches_torch_forward_and_backward(name, args, shape):
    with jax.enable_x64(True):
        x = np.random.default_rng(len(shape)).standard_normal(shape)
        theirs = getattr(torch.nn, name)(*args)
        ours = getattr(jnn, name)(*args)
        t_x = torch.tensor(x, requires_grad=True)
        t_out = theirs(t_x)
        w = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
        (t_out * torch.tensor(w)).sum().backward()
        def forward_and_grad(v):
            out, vjp = jax.vjp(ours, v)
            return out, vjp(jnp.asarray(w))[0]

        # One compilation of the forward and its VJP (eagerly, each op of both compiles on its own).
        out, grad = jax.jit(forward_and_grad)(jnp.asarray(x))
        np.testing.assert_array_equal(np.asarray(out), t_out.detach().numpy())
        np.testing.assert_allclose(np.asarray(grad), t_x.grad.numpy(), rtol=0, atol=1e-12)


def test_pixel_shuffle_errors_are_torchs():
    with pytest.raises(RuntimeError, match=r"input.size\(-3\)=5 is not divisible by 4"):
        jnn.PixelShuffle(2)(jnp.zeros((1, 5, 2, 2)))
    with pytest.raises(RuntimeError, match=r"input.size\(-1\)=3 is not divisible by 2"):
        jnn.PixelUnshuffle(2)(jnp.zeros((1, 1, 2, 3)))
