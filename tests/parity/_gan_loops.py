"""A tiny GAN trained twice, in torch and in jax_impl + flax.nnx, each side recorded with parity.Recorder.

Two MLPs (G: 4 -> 8 -> 2, D: 2 -> 8 -> 1 with a sigmoid), two Adams (betas (0.5, 0.999)), BCE; real
samples and latents drawn each step with torch.randn on the torch side and jax_impl.random.randn on the
JAX side, from the same seed, so both sides see the same numbers. The DCGAN step: D on real and detached
fake, then G through the updated D. Weights and draws are made in float32 and cast to the run's dtype
(``model.double()``), so the float64 run is the float32 run's exact trajectory: torch's float64 run is
the floor of its float32 run.
"""

from __future__ import annotations

import numpy as np

BATCH, LATENT, HIDDEN = 16, 4, 8
ADAM = {"lr": 1e-2, "betas": (0.5, 0.999)}


def torch_gan(folder, *, steps: int, dtype: str = "float64", keep_every: int = 5, perturb_at: int | None = None,
              seed: int = 0, close: bool = True, **recorder_kwargs):
    """Train and record the torch side; ``perturb_at`` adds 1e-3 to G's last bias after that step's update.
    Returns the recorder (closed unless ``close=False``)."""
    import torch
    from torch import nn

    import parity

    dt = getattr(torch, dtype)
    torch.manual_seed(seed)
    G = nn.Sequential(nn.Linear(LATENT, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 2)).to(dt)
    D = nn.Sequential(nn.Linear(2, HIDDEN), nn.LeakyReLU(0.2), nn.Linear(HIDDEN, 1), nn.Sigmoid()).to(dt)
    opt_g, opt_d = torch.optim.Adam(G.parameters(), **ADAM), torch.optim.Adam(D.parameters(), **ADAM)
    bce = nn.BCELoss()
    ones, zeros = torch.ones(BATCH, 1, dtype=dt), torch.zeros(BATCH, 1, dtype=dt)
    rec = parity.Recorder(folder, "torch", keep_every=keep_every, meta={"dtype": dtype, "seed": seed},
                          **recorder_kwargs)
    for i in range(steps):
        real = torch.randn(BATCH, 2).to(dt) * 0.5 + 2.0
        z = torch.randn(BATCH, LATENT).to(dt)
        opt_d.zero_grad()
        fake = G(z)
        err_d = bce(D(real), ones) + bce(D(fake.detach()), zeros)
        err_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        err_g = bce(D(fake), ones)
        err_g.backward()
        opt_g.step()
        if i == perturb_at:
            with torch.no_grad():
                G[2].bias += 1e-3
        rec.step(i, loss_d=err_d, loss_g=err_g, netG=G, netD=D, z=z, optD=opt_d, optG=opt_g)
    if close:
        rec.close()
    return rec


def jax_gan(folder, *, steps: int, dtype: str = "float64", keep_every: int = 5, seed: int = 0, **recorder_kwargs):
    """The same loop in jax_impl + flax.nnx (jitted D and G steps), recorded under torch's names."""
    import jax
    from flax import nnx

    import jax_impl.nn as jnn
    import parity
    from jax_impl import optim, random

    dt = np.dtype(dtype)
    random.manual_seed(seed)
    G = jnn.Sequential(jnn.Linear(LATENT, HIDDEN), jnn.ReLU(), jnn.Linear(HIDDEN, 2))
    D = jnn.Sequential(jnn.Linear(2, HIDDEN), jnn.LeakyReLU(0.2), jnn.Linear(HIDDEN, 1), jnn.Sigmoid())
    for model in (G, D):  # torch's model.to(dtype)
        nnx.update(model, jax.tree.map(lambda p: p.astype(dt), nnx.state(model, nnx.Param)))
    tx_g, tx_d = optim.adam(**ADAM), optim.adam(**ADAM)
    gdef_g, p_g = nnx.split(G, nnx.Param)
    gdef_d, p_d = nnx.split(D, nnx.Param)
    s_g, s_d = tx_g.init(p_g), tx_d.init(p_d)
    bce = jnn.BCELoss()
    ones, zeros = np.ones((BATCH, 1), dt), np.zeros((BATCH, 1), dt)

    @jax.jit
    def d_step(p_d, s_d, p_g, real, z):
        def loss(p_d):
            netD, netG = nnx.merge(gdef_d, p_d), nnx.merge(gdef_g, p_g)
            fake = jax.lax.stop_gradient(netG(z))
            return bce(netD(real), ones) + bce(netD(fake), zeros)

        err, grads = jax.value_and_grad(loss)(p_d)
        p_d, s_d = tx_d.step(grads, s_d, p_d)
        return p_d, s_d, err

    @jax.jit
    def g_step(p_g, s_g, p_d, z):
        def loss(p_g):
            return bce(nnx.merge(gdef_d, p_d)(nnx.merge(gdef_g, p_g)(z)), ones)

        err, grads = jax.value_and_grad(loss)(p_g)
        p_g, s_g = tx_g.step(grads, s_g, p_g)
        return p_g, s_g, err

    # fixed_horizon: the optimizers' host scalars for `steps` steps are tabulated when the steps are traced.
    with optim.fixed_horizon(steps), parity.Recorder(folder, "jax", keep_every=keep_every,
                                                     meta={"dtype": dtype, "seed": seed}, **recorder_kwargs) as rec:
        for i in range(steps):
            real = random.randn(BATCH, 2).astype(dt) * dt.type(0.5) + dt.type(2.0)
            z = random.randn(BATCH, LATENT).astype(dt)
            p_d, s_d, err_d = d_step(p_d, s_d, p_g, real, z)
            p_g, s_g, err_g = g_step(p_g, s_g, p_d, z)
            nnx.update(G, p_g)
            nnx.update(D, p_d)
            rec.step(i, loss_d=err_d, loss_g=err_g, netG=G, netD=D, z=z,
                     optD=parity.optimizer_record(s_d, D, name="Adam", hyperparameters=ADAM),
                     optG=parity.optimizer_record(s_g, G, name="Adam", hyperparameters=ADAM))
    return rec
