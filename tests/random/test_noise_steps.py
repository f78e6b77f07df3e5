"""A training loop that draws noise every step, on torch's numbers: the official VAE example's step.

torch's ``examples/vae`` draws ``eps = torch.randn_like(std)`` inside the
forward (the reparameterisation), then steps Adam on BCE + KL. Here the JAX
twin (``jax_impl.nn`` layers built after the same seed, so the same initial
weights) draws its ``eps`` with ``jax_impl.random.randn_like`` on the host
before each jitted gradient step, in the order torch draws it, and passes it
in. Float64: every parameter within 1e-12 of torch's after the steps
(measured at most 1.1e-16 over 4 steps: the sides differ only in the order of float64 sums, and
every noise draw is the same);
the generators end in the same state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as jnn
import jax_impl.random as jr
from jax_impl import optim
from jax_impl.nn import functional as JF
from parity.convert import to_torch_state_dict

D, H, Z = 12, 8, 3  # the example's 784 -> 400 -> 20, at a tiny size


class TorchVAE(torch.nn.Module):
    """``examples/vae/main.py``'s model, as written (sizes aside)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, H)
        self.fc21 = torch.nn.Linear(H, Z)
        self.fc22 = torch.nn.Linear(H, Z)
        self.fc3 = torch.nn.Linear(Z, H)
        self.fc4 = torch.nn.Linear(H, D)

    def encode(self, x):
        h1 = torch.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(torch.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, D))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def torch_loss(recon_x, x, mu, logvar):
    bce = torch.nn.functional.binary_cross_entropy(recon_x, x.view(-1, D), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


class JaxVAE(nnx.Module):
    def __init__(self, dtype):
        self.fc1 = jnn.Linear(D, H, dtype=dtype)
        self.fc21 = jnn.Linear(H, Z, dtype=dtype)
        self.fc22 = jnn.Linear(H, Z, dtype=dtype)
        self.fc3 = jnn.Linear(Z, H, dtype=dtype)
        self.fc4 = jnn.Linear(H, D, dtype=dtype)

    def __call__(self, x, eps):
        h1 = jax.nn.relu(self.fc1(x))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        z = mu + eps * jnp.exp(0.5 * logvar)
        return jax.nn.sigmoid(self.fc4(jax.nn.relu(self.fc3(z)))), mu, logvar


@pytest.mark.parametrize("batch", [4, 7])
def test_vae_steps_with_randn_like_noise_match_torch_in_float64(batch):
    """Batch 4 draws 12 normals a step (torch's per-element path, the cached value carried between steps);
    batch 7 draws 21 (the blocks of 16, the last one redrawn)."""
    steps = 4
    data = np.random.default_rng(batch).uniform(size=(steps, batch, D))
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        model = TorchVAE()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for x in data:
            opt.zero_grad()
            recon, mu, logvar = model(torch.from_numpy(x))
            torch_loss(recon, torch.from_numpy(x), mu, logvar).backward()
            opt.step()
        theirs = model.state_dict()
        torch_state = torch.get_rng_state()
    finally:
        torch.set_default_dtype(torch.float32)

    with jax.enable_x64(True):
        jr.manual_seed(0)
        ours_model = JaxVAE(jnp.float64)
        graphdef, params = nnx.split(ours_model, nnx.Param)
        tx = optim.adam(lr=1e-2)
        opt_state = tx.init(params)

        def loss_fn(p, x, eps):
            recon, mu, logvar = nnx.merge(graphdef, p)(x, eps)
            bce = JF.binary_cross_entropy(recon, x, reduction="sum")
            return bce - 0.5 * jnp.sum(1 + logvar - mu**2 - jnp.exp(logvar))

        grad = jax.jit(jax.grad(loss_fn))
        for x in data:
            eps = jr.randn_like(np.zeros((batch, Z)))  # torch.randn_like(std): float64, drawn as torch draws it
            params, opt_state = tx.step(grad(params, jnp.asarray(x), jnp.asarray(eps)), opt_state, params)
        nnx.update(ours_model, params)
        ours = to_torch_state_dict(ours_model)

    assert bytes(jr.get_rng_state()) == bytes(torch_state.numpy())
    for k, v in theirs.items():
        np.testing.assert_allclose(ours[k].numpy(), v.numpy(), rtol=0, atol=1e-12, err_msg=k)
