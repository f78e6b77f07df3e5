"""Hardshrink, Softshrink, GLU, Softmin and Softmax2d against torch: float64 forward and gradient over seeded
inputs that include the band edges (``x = +-lambd``) and NaN; forward bit for bit where torch's kernel is a
selection (the shrinks), gradients within 1e-12 (measured at most 1.1e-16 for GLU/Softmin)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn

_CASES = [("Hardshrink", (), (3, 7)), ("Hardshrink", (0.2,), (2, 3, 4)), ("Softshrink", (), (3, 7)),
          ("Softshrink", (1.0,), (5,)), ("GLU", (), (3, 8)), ("GLU", (1,), (2, 6, 3)), ("Softmin", (1,), (3, 5)),
          ("Softmin", (0,), (4, 2, 3)), ("Softmax2d", (), (2, 3, 4, 4)), ("Softmax2d", (), (3, 2, 5))]


@pytest.mark.parametrize(("name", "args", "shape"), _CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CASES)])
def test_matches_torch(name, args, shape):
    with jax.enable_x64(True):
        rng = np.random.default_rng(len(shape) + len(args))
        x = rng.standard_normal(shape)
        if "shrink" in name:
            lambd = args[0] if args else 0.5
            flat = x.reshape(-1)
            flat[:3] = [lambd, -lambd, np.nan]  # the band's edges and a NaN
        theirs, ours = getattr(torch.nn, name)(*args), getattr(jnn, name)(*args)
        t_x = torch.tensor(x, requires_grad=True)
        t_y = theirs(t_x)
        g = rng.standard_normal(tuple(t_y.shape))
        (t_y * torch.tensor(g)).nansum().backward()
        def loss(v):
            out = ours(v)
            return jnp.nansum(out * g), out

        # One compilation of the forward and its gradient (eagerly, each op of both compiles on its own).
        grad, y = jax.jit(jax.grad(loss, has_aux=True))(jnp.asarray(x))
        if "shrink" in name:
            np.testing.assert_array_equal(np.asarray(y), t_y.detach().numpy())
        else:
            np.testing.assert_allclose(np.asarray(y), t_y.detach().numpy(), rtol=0, atol=1e-15)
        finite = np.isfinite(t_x.grad.numpy())
        np.testing.assert_allclose(np.asarray(grad)[finite], t_x.grad.numpy()[finite], rtol=0, atol=1e-12)


def test_errors_are_torchs():
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is size 3"):
        jnn.GLU(1)(jnp.zeros((2, 3)))
    with pytest.raises(RuntimeError, match=r"lambda must be in range \[0, 3.40282e\+38\] for input dtype Float, but found -1"):
        jnn.Softshrink(-1.0)(jnp.zeros(2, jnp.float32))
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D instead"):
        jnn.Softmax2d()(jnp.zeros((2, 3)))
