"""jax_impl.random.staged: torch's draws inside traced functions, against the same torch calls in the same order.

Each step draws latents (``randn``), noise shaped like an input
(``randn_like``), timesteps (``randint``), uniforms, a normal with traced
mean and std, a Bernoulli and a categorical with traced probabilities. It
runs three ways (``jit_with_host_draws``, a plain ``jax.jit`` with ordered
callbacks, eagerly), three calls each with host draws between them, and
every value and the generator's state bytes must equal torch's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.random as jr
from jax_impl.random import staged
from jax_impl.random.host_draws import jit_with_host_draws


def _torch_step(x: torch.Tensor, probs: torch.Tensor):
    z = torch.randn(4, 5, 1, 1)
    noise = torch.randn_like(x)
    t = torch.randint(0, 1000, (4,))
    u = torch.rand(3, dtype=torch.float64)
    n = torch.normal(x * 0.3, x.abs() * 0.7)
    n2 = torch.normal(x * 0.3, 0.5)
    b = torch.bernoulli(torch.sigmoid(x))
    a = torch.multinomial(probs, 1).squeeze(-1)
    e = torch.empty(6).exponential_(2.0)
    return z, noise, t, u, n, n2, b, a, e


def _jax_step(x, probs):
    z = staged.randn(4, 5, 1, 1)
    noise = staged.randn_like(x)
    t = staged.randint(0, 1000, (4,))
    u = staged.rand(3, dtype=jnp.float64)
    n = staged.normal(x * 0.3, jnp.abs(x) * 0.7)
    n2 = staged.normal(x * 0.3, 0.5)
    b = staged.bernoulli(jax.nn.sigmoid(x))
    a = staged.categorical(probs)
    e = staged.exponential((6,), 2.0)
    return z, noise, t, u, n, n2, b, a, e


@pytest.mark.parametrize("mode", ["host_draws", "jit", "eager"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_steps_draws_are_torchs_in_every_mode(mode, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 9)).astype(dtype)
    probs = rng.uniform(0.05, 1, (5, 3)).astype(dtype)
    with jax.enable_x64(True):
        step = {"host_draws": jit_with_host_draws(_jax_step, key_argnums=(0, 1)), "jit": jax.jit(_jax_step),
                "eager": _jax_step}[mode]
        torch.manual_seed(123)
        jr.manual_seed(123)
        for _ in range(3):
            theirs = _torch_step(torch.from_numpy(x), torch.from_numpy(probs))
            ours = step(jnp.asarray(x), jnp.asarray(probs))
            for name, o, t in zip("z noise t u n n2 b a e".split(), ours, theirs, strict=True):
                o = np.asarray(o)
                assert o.shape == tuple(t.shape), name
                if name in ("z", "u", "e"):
                    assert o.dtype == t.numpy().dtype, name
                np.testing.assert_array_equal(o, t.numpy(), err_msg=name)
            # A host draw between two steps comes between them, as in torch.
            np.testing.assert_array_equal(jr.rand(2), torch.rand(2).numpy())
            assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def test_a_diffusion_training_step_with_noise_and_timesteps_matches_torch_in_float64():
    """DDPM's loss ``|| eps - model(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps) ||^2`` with ``t = randint`` and
    ``eps = randn_like(x0)`` drawn inside the jitted gradient step, SGD on a linear denoiser: after 4 steps the
    weights are within 1e-12 of torch's (measured 0 to 2e-16: float64 sums in another order)."""
    steps, T = 4, 50
    abar = np.cumprod(1 - np.linspace(1e-4, 0.02, T))
    x0s = np.random.default_rng(2).standard_normal((steps, 8, 6))
    w0 = np.random.default_rng(3).standard_normal((6, 6)) * 0.1

    torch.manual_seed(0)
    w_t = torch.tensor(w0, requires_grad=True)
    abar_t = torch.tensor(abar)
    for x0 in map(torch.from_numpy, x0s):
        t = torch.randint(0, T, (x0.shape[0],))
        eps = torch.randn_like(x0)
        a = abar_t[t][:, None]
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * eps
        loss = ((x_t @ w_t - eps) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w_t -= 0.1 * w_t.grad
            w_t.grad = None

    with jax.enable_x64(True):
        abar_j = jnp.asarray(abar)

        def loss_fn(w, x0):
            t = staged.randint(0, T, (x0.shape[0],))
            eps = staged.randn_like(x0)
            a = abar_j[t][:, None]
            x_t = jnp.sqrt(a) * x0 + jnp.sqrt(1 - a) * eps
            return jnp.mean((x_t @ w - eps) ** 2)

        grad = jit_with_host_draws(jax.grad(loss_fn), key_argnums=(1,))
        jr.manual_seed(0)
        w = jnp.asarray(w0)
        for x0 in x0s:
            w = w - 0.1 * grad(w, jnp.asarray(x0))
        np.testing.assert_allclose(np.asarray(w), w_t.detach().numpy(), rtol=0, atol=1e-12)
    assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def test_staged_draws_refuse_bad_arguments_as_torch():
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        jr.default_generator.staged_normal((2,), 0.0, -1.0)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        staged.randint(5, 5, (2,))
    with pytest.raises(RuntimeError, match="exponential_ expects lambda > 0.0"):
        staged.exponential((2,), 0.0)
