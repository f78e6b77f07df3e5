"""DCGAN, pytorch/examples ``dcgan/main.py``'s loop, on torch (``train_torch``) and on JAX (``train_jax``).

The example's loop, step for step (commit 77f55b912142)::

    netD.zero_grad()
    output = netD(real);              errD_real = BCE(output, full(real_label)); errD_real.backward()
    noise = torch.randn(b, nz, 1, 1); fake = netG(noise)
    output = netD(fake.detach());     errD_fake = BCE(output, fill(fake_label));  errD_fake.backward()
    optimizerD.step()
    netG.zero_grad()
    output = netD(fake);              errG = BCE(output, fill(real_label));       errG.backward()
    optimizerG.step()
    if i % 100 == 0: fake = netG(fixed_noise)          # a sample, in train mode (G's running stats move)

with both networks in train mode throughout: D's BatchNorm running statistics
move three times a step, G's once (and once more at each sample). Both Adams
take ``lr=2e-4, betas=(0.5, 0.999)``; the weights are initialised by the
example's ``weights_init`` (convolutions ``N(0, 0.02)``, BatchNorm weights
``N(1, 0.02)``, biases zero) after the layers' own default initialisation,
so the stream is consumed as the example consumes it.

Sizes are small: the example's layer pattern (a 4x4 transposed convolution
from the latent, then stride-2 blocks doubling the image, BatchNorm + ReLU in
G, BatchNorm + LeakyReLU(0.2) in D) for ``image_size`` 16 by default;
``image_size=64`` builds exactly the example's networks. The data are
scikit-learn's 8x8 digits (bundled, no download), upsampled by pixel
repetition and normalised to [-1, 1] as the example's
``Normalize((0.5,), (0.5,))``, loaded by a shuffled ``DataLoader`` drawing
from the global stream.

The JAX side is written with ``jax_impl.nn`` layers (``flax.nnx``),
``jax_impl.nn.init`` and ``jax_impl.random`` (torch's numbers: layer inits,
``weights_init``'s normals, the latents, the loader's shuffles), and
``jax_impl.optim.adam``; one ``jax.jit`` step holds the D update and the
G update, G's backward being the pull-back (``jax.vjp``) of the gradient
that flows out of D, as torch's ``errG.backward()`` through ``fake``.

Each step records ``loss_D``, ``loss_G``, ``D_x``, ``D_G_z1``, ``D_G_z2``;
every ``keep_every`` steps (and the last) the two networks' state dicts
(``netG.main.0.weight``, ...), and in a recording the two Adams' states
(``optD.state.0.exp_avg``, ...); at each sample the generated ``fake_fixed``.

Run: ``python -m examples.loops.dcgan --framework torch --out runs/dcgan-torch --steps 50 --dtype float64``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from typing import Any

import numpy as np

import jax_impl.nn as jnn
from examples.loops.recording import epochs, kept, record, recorder

__all__ = ["Config", "JaxDiscriminator", "JaxGenerator", "images", "jax_drawing_step", "jax_programs", "main", "torch_networks",
           "train_jax", "train_torch"]

REAL_LABEL = 1
FAKE_LABEL = 0
# The step's state arguments (pD, bD, optD, pG, bG, optG), donated: each step replaces them.
STATE_ARGNUMS = (0, 1, 2, 3, 4, 5)


@dataclasses.dataclass(frozen=True)
class Config:
    """The example's options at a small size (its defaults: nz 100, ngf/ndf 64, 64x64 RGB, batch 64)."""

    nz: int = 8
    ngf: int = 4
    ndf: int = 4
    nc: int = 1
    image_size: int = 16
    batch_size: int = 16
    num_images: int = 200  # 13 batches an epoch, the last of 8: epochs turn over (and samples repeat) within 50 steps
    lr: float = 0.0002
    beta1: float = 0.5
    sample_every: int = 100  # the example's `if i % 100 == 0` (i: the batch within the epoch)
    keep_every: int = 10  # the networks' states are recorded at these steps and at the last

    def __post_init__(self) -> None:
        if self.image_size < 16 or self.image_size & (self.image_size - 1):
            raise ValueError(f"image_size must be a power of two, at least 16, got {self.image_size}")


def images(config: Config) -> np.ndarray:
    """The first ``num_images`` digits, float32 ``(N, 1, S, S)`` in [-1, 1] (nc copies of the channel).

    The 8x8 images (in [0, 1]) are repeated to ``image_size`` pixels and normalised by ``(x - 0.5) / 0.5``,
    the example's ``Normalize``; every value is exact, so both frameworks read the same numbers.
    """
    from jax_impl.data.datasets import digits_arrays

    x = digits_arrays()[0][: config.num_images]
    factor = config.image_size // 8
    x = np.repeat(np.repeat(x, factor, axis=2), factor, axis=3)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    return np.ascontiguousarray(np.repeat(x, config.nc, axis=1), dtype=np.float32)


def _sample_steps(batches: int, steps: int, every: int) -> list[int]:
    """The steps at which the example samples from the fixed noise: ``i % every == 0`` in each epoch."""
    return [step for step in range(steps) if step % batches % every == 0]


def _generator_layers(c: Config) -> list[tuple]:
    """The example's Generator as ``(kind, *args)`` rows: ConvT(nz, ngf*2^n) 4x4, n blocks halving the
    channels and doubling the image, ConvT(ngf, nc) to ``image_size``, Tanh (n = log2(image_size) - 3)."""
    n = int(math.log2(c.image_size)) - 3
    mult = 2**n
    rows: list[tuple] = [("convT", c.nz, c.ngf * mult, 4, 1, 0), ("bn", c.ngf * mult), ("relu",)]
    for _ in range(n):
        rows += [("convT", c.ngf * mult, c.ngf * mult // 2, 4, 2, 1), ("bn", c.ngf * mult // 2), ("relu",)]
        mult //= 2
    return rows + [("convT", c.ngf, c.nc, 4, 2, 1), ("tanh",)]


def _torch_order(rows: list[tuple]) -> list[str]:
    """The parameters of a ``main`` Sequential of ``rows`` in torch's ``parameters()`` order (a module that
    ``nnx.merge`` rebuilt lists its attributes sorted, so its own order is not torch's)."""
    names = {"conv": ("weight",), "convT": ("weight",), "bn": ("weight", "bias")}
    return [f"main.{i}.{p}" for i, (kind, *_) in enumerate(rows) for p in names.get(kind, ())]


def _discriminator_layers(c: Config) -> list[tuple]:
    """The example's Discriminator: Conv(nc, ndf) + LeakyReLU, n blocks doubling the channels with
    BatchNorm, Conv(ndf*2^n, 1) 4x4 to one value, Sigmoid."""
    n = int(math.log2(c.image_size)) - 3
    rows: list[tuple] = [("conv", c.nc, c.ndf, 4, 2, 1), ("lrelu",)]
    mult = 1
    for _ in range(n):
        rows += [("conv", c.ndf * mult, c.ndf * mult * 2, 4, 2, 1), ("bn", c.ndf * mult * 2), ("lrelu",)]
        mult *= 2
    return rows + [("conv", c.ndf * mult, 1, 4, 1, 0), ("sigmoid",)]


# ----------------------------------------------------------------------------------------------- torch


def torch_networks(c: Config) -> tuple[type, type, Any]:
    """The example's ``Generator``, ``Discriminator`` and ``weights_init`` (layers from the rows above)."""
    import torch
    from torch import nn

    def build(rows: list[tuple]) -> nn.Sequential:
        make = {
            "convT": lambda *a: nn.ConvTranspose2d(*a, bias=False),
            "conv": lambda *a: nn.Conv2d(*a, bias=False),
            "bn": nn.BatchNorm2d,
            "relu": lambda: nn.ReLU(True),
            "lrelu": lambda: nn.LeakyReLU(0.2, inplace=True),
            "tanh": nn.Tanh,
            "sigmoid": nn.Sigmoid,
        }
        return nn.Sequential(*(make[kind](*args) for kind, *args in rows))

    class Generator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main = build(_generator_layers(c))

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main = build(_discriminator_layers(c))

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return self.main(input).view(-1, 1).squeeze(1)

    def weights_init(m: nn.Module) -> None:
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            torch.nn.init.normal_(m.weight, 1.0, 0.02)
            torch.nn.init.zeros_(m.bias)

    return Generator, Discriminator, weights_init


def train_torch(folder: Any = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
                config: Config = Config(), draw_dtype: str | None = None) -> list[dict[str, Any]]:
    """The example's loop on torch; returns one dict of recorded values per step (and records to ``folder``).

    Args:
      folder: a ``parity.Recorder`` folder, or ``None`` to record nothing on disk.
      steps: optimizer steps (of each network).
      dtype: ``"float64"`` or ``"float32"``: the networks, data and losses.
      seed: ``torch.manual_seed(seed)``, as the example's ``--manualSeed``.
      config: sizes and hyperparameters.
      draw_dtype: the dtype the random numbers (initial weights, latents) are drawn in before they are cast
        to ``dtype``; ``dtype`` by default. A float64 run drawing float32 numbers is a float32 run's exact
        twin, the reference of torch's float32 floor.
    """
    import torch
    from torch import nn, optim

    c = config
    cdt, ddt = getattr(torch, dtype), getattr(torch, draw_dtype or dtype)
    torch.manual_seed(seed)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(images(c)).to(cdt))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=c.batch_size, shuffle=True)
    Generator, Discriminator, weights_init = torch_networks(c)
    default = torch.get_default_dtype()
    torch.set_default_dtype(ddt)  # the layers' own initialisation draws in the draw dtype
    try:
        netG = Generator()
        netG.apply(weights_init)
        netD = Discriminator()
        netD.apply(weights_init)
    finally:
        torch.set_default_dtype(default)
    netG.to(cdt)
    netD.to(cdt)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(c.batch_size, c.nz, 1, 1, dtype=ddt).to(cdt)
    optimizerD = optim.Adam(netD.parameters(), lr=c.lr, betas=(c.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=c.lr, betas=(c.beta1, 0.999))

    def state(net: nn.Module) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    records: list[dict[str, Any]] = []
    meta = {"example": "dcgan", "dtype": dtype, "seed": seed, "config": dataclasses.asdict(c)}
    keep_steps = _sample_steps(len(dataloader), steps, c.sample_every)
    with recorder(folder, "torch", meta, keep_every=c.keep_every, keep_steps=keep_steps) as rec:
        for step, i, _, data in epochs(dataloader, steps):
            netD.zero_grad()
            real_cpu = data[0]
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), REAL_LABEL, dtype=real_cpu.dtype)
            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            noise = torch.randn(batch_size, c.nz, 1, 1, dtype=ddt).to(cdt)
            fake = netG(noise)
            label.fill_(FAKE_LABEL)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            netG.zero_grad()
            label.fill_(REAL_LABEL)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            values: dict[str, Any] = {"loss_D": errD.item(), "loss_G": errG.item(), "D_x": D_x,
                                      "D_G_z1": D_G_z1, "D_G_z2": D_G_z2}
            if i % c.sample_every == 0:
                values["fake_fixed"] = netG(fixed_noise).detach().numpy()
            modules = None
            if kept(step, steps, c.keep_every):
                values["netG"], values["netD"] = state(netG), state(netD)
                modules = {"netG": netG, "netD": netD, "optD": optimizerD, "optG": optimizerG}
            record(records, rec, step, values, modules)
    return records


# ------------------------------------------------------------------------------------------------- JAX


def _jax_network(rows: list[tuple], dtype: Any) -> jnn.Sequential:
    """A ``jax_impl.nn.Sequential`` of the rows; its layers' default initialisation draws torch's numbers."""
    make = {
        "convT": lambda *a: jnn.ConvTranspose2d(*a, bias=False, dtype=dtype),
        "conv": lambda *a: jnn.Conv2d(*a, bias=False, dtype=dtype),
        "bn": lambda n: jnn.BatchNorm2d(n, dtype=dtype),
        "relu": lambda: jnn.ReLU(True),
        "lrelu": lambda: jnn.LeakyReLU(0.2, inplace=True),
        "tanh": jnn.Tanh,
        "sigmoid": jnn.Sigmoid,
    }
    return jnn.Sequential(*(make[kind](*args) for kind, *args in rows))


class JaxGenerator(jnn.Module):
    """The example's ``Generator`` on ``jax_impl.nn``: the same ``main`` Sequential, so the same state-dict keys."""

    def __init__(self, config: Config, dtype: Any) -> None:
        self.main = _jax_network(_generator_layers(config), dtype)

    def __call__(self, input: Any) -> Any:
        return self.main(input)


class JaxDiscriminator(jnn.Module):
    """The example's ``Discriminator`` on ``jax_impl.nn``."""

    def __init__(self, config: Config, dtype: Any) -> None:
        self.main = _jax_network(_discriminator_layers(config), dtype)

    def __call__(self, input: Any) -> Any:
        return self.main(input).reshape(-1, 1).squeeze(1)


def _jax_weights_init(net: Any) -> None:
    """The example's ``weights_init`` applied as ``net.apply`` applies it: layer by layer, in order."""
    import jax.numpy as jnp

    from jax_impl.nn import init

    for layer in net.main:
        classname = type(layer).__name__
        if classname.find("Conv") != -1:
            layer.weight[...] = init.normal_(None, layer.weight.shape, layer.weight.dtype, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            layer.weight[...] = init.normal_(None, layer.weight.shape, layer.weight.dtype, 1.0, 0.02)
            layer.bias[...] = jnp.zeros_like(layer.bias[...])


def train_jax(folder: Any = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
              config: Config = Config(), draw_dtype: str | None = None) -> list[dict[str, Any]]:
    """The example's loop on ``jax_impl`` and ``flax.nnx``; the arguments and records are :func:`train_torch`'s."""
    import jax

    with jax.enable_x64(dtype == "float64" or draw_dtype == "float64"):
        return _train_jax(folder, steps, dtype, seed, config, draw_dtype or dtype)


@functools.lru_cache(maxsize=8)
def jax_programs(graphG: Any, graphD: Any, c: Config) -> tuple[Any, Any, Any, Any]:
    """The two Adams, the jitted step (the batch's latents an argument) and the jitted sample of the networks
    ``graphG`` and ``graphD``.

    The step donates its state (both networks' parameters and buffers, both Adams' states): XLA writes the
    new state into the old buffers, as torch's in-place updates leave no old parameters behind.

    Kept per networks' graphs and config, so that a second run in the same process (both dtypes, or a
    recording after a comparison) reuses the compiled step: compiling it takes most of a short run.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl import optim

    criterion = jnn.BCELoss()
    txD = optim.adam(lr=c.lr, betas=(c.beta1, 0.999))
    txG = optim.adam(lr=c.lr, betas=(c.beta1, 0.999))

    def forward(graphdef: Any, params: Any, buffers: Any, x: Any) -> tuple[Any, Any]:
        # Fresh buffer variables: BatchNorm (train mode) writes its running statistics into them.
        net = nnx.merge(graphdef, params, jax.tree.map(lambda v: v, buffers))
        out, new = net(x), nnx.state(net, nnx.Not(nnx.Param))
        # Returned in the form given: the loop's pure dicts, which jit flattens without a Python call per array.
        return out, new if isinstance(buffers, nnx.State) else nnx.to_pure_dict(new)

    def d_loss(params: Any, buffers: Any, x: Any, label: Any) -> tuple[Any, tuple[Any, Any]]:
        output, buffers = forward(graphD, params, buffers, x)
        return criterion(output, label), (output, buffers)

    @functools.partial(jax.jit, donate_argnums=STATE_ARGNUMS)
    def train_step(pD, bD, optD, pG, bG, optG, real, noise):
        fake, pull_back, bG = jax.vjp(lambda p: forward(graphG, p, bG, noise), pG, has_aux=True)
        real_label = jnp.full((real.shape[0],), REAL_LABEL, real.dtype)
        fake_label = jnp.full((real.shape[0],), FAKE_LABEL, real.dtype)
        # (1) D: the two backward passes accumulate into one gradient, as torch's .grad does.
        (errD_real, (output, bD)), g_real = jax.value_and_grad(d_loss, has_aux=True)(pD, bD, real, real_label)
        D_x = jnp.mean(output)
        (errD_fake, (output, bD)), g_fake = jax.value_and_grad(d_loss, has_aux=True)(
            pD, bD, jax.lax.stop_gradient(fake), fake_label)
        D_G_z1 = jnp.mean(output)
        pD, optD = txD.step(jax.tree.map(jnp.add, g_real, g_fake), optD, pD)
        # (2) G: D (already stepped) on the same fake, its gradient pulled back through G.
        (errG, (output, bD)), g_image = jax.value_and_grad(d_loss, argnums=2, has_aux=True)(pD, bD, fake, real_label)
        D_G_z2 = jnp.mean(output)
        (gG,) = pull_back(g_image)
        pG, optG = txG.step(gG, optG, pG)
        scalars = {"loss_D": errD_real + errD_fake, "loss_G": errG, "D_x": D_x, "D_G_z1": D_G_z1, "D_G_z2": D_G_z2}
        return (pD, bD, optD, pG, bG, optG), scalars

    sample = jax.jit(lambda p, b, z: forward(graphG, p, b, z))
    return txD, txG, train_step, sample


@functools.lru_cache(maxsize=8)
def jax_drawing_step(graphG: Any, graphD: Any, c: Config, draw_dtype: str) -> Any:
    """:func:`jax_programs`' step with the example's ``noise = torch.randn(b, nz, 1, 1)`` drawn inside it
    (``jax_impl.random.staged.randn``, in ``draw_dtype``, cast to the batch's dtype).

    ``jit_with_host_draws`` draws the latents on the host before each call, from torch's stream, where the
    example draws them (the only draw of a step), and hands them to the compiled step: small float32
    normals as their transform's two halves, which the step joins, with no wait on the host for the
    transform (an eager ``jax_impl.random.randn`` before the call waits for it).
    """
    from jax_impl.random import staged
    from jax_impl.random.host_draws import jit_with_host_draws

    train_step = jax_programs(graphG, graphD, c)[2]

    def drawing_step(pD, bD, optD, pG, bG, optG, real):
        noise = staged.randn(real.shape[0], c.nz, 1, 1, dtype=draw_dtype).astype(real.dtype)
        return train_step(pD, bD, optD, pG, bG, optG, real, noise)

    return jit_with_host_draws(drawing_step, donate_argnums=STATE_ARGNUMS, key_argnums=(6,))


def _train_jax(folder: Any, steps: int, dtype: str, seed: int, c: Config, draw_dtype: str) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp
    from flax import nnx, traverse_util

    import jax_impl.data as jdata
    import jax_impl.random as jr

    cdt, ddt = jnp.dtype(dtype), jnp.dtype(draw_dtype)
    jr.manual_seed(seed)
    dataset = jdata.TensorDataset(images(c).astype(cdt))
    dataloader = jdata.DataLoader(dataset, batch_size=c.batch_size, shuffle=True)

    def split(network: type) -> tuple[Any, Any, Any]:
        net = network(c, ddt)
        _jax_weights_init(net)
        graphdef, params, buffers = nnx.split(net, nnx.Param, ...)
        cast = lambda a: a.astype(cdt) if jnp.issubdtype(a.dtype, jnp.floating) else a  # noqa: E731
        # Pure dicts (nested dicts of arrays): each step's call flattens them without Python.
        return graphdef, *(jax.tree.map(cast, nnx.to_pure_dict(state)) for state in (params, buffers))

    # Built in the example's order: G (layers, then weights_init), D, then the fixed noise.
    graphG, pG, bG = split(JaxGenerator)
    graphD, pD, bD = split(JaxDiscriminator)
    fixed_noise = jnp.asarray(jr.randn(c.batch_size, c.nz, 1, 1, dtype=ddt), cdt)
    txD, txG, _, sample = jax_programs(graphG, graphD, c)
    train_step = jax_drawing_step(graphG, graphD, c, draw_dtype)
    optD, optG = txD.init(pD), txG.init(pG)

    def state(params: Any, buffers: Any) -> dict[str, np.ndarray]:
        # torch's state_dict keys and order: the nnx paths joined with dots, parameters and buffers per layer.
        flat = traverse_util.flatten_dict(params) | traverse_util.flatten_dict(buffers)
        out = {}
        for path in sorted(flat, key=lambda p: tuple(int(s) if str(s).isdigit() else -1 for s in p)):
            value = np.asarray(flat[path][...])
            out[".".join(map(str, path))] = value.astype(np.int64) if value.dtype.kind in "iu" else value
        return out

    records: list[dict[str, Any]] = []
    meta = {"example": "dcgan", "dtype": dtype, "seed": seed, "config": dataclasses.asdict(c)}
    carry = (pD, bD, optD, pG, bG, optG)
    keep_steps = _sample_steps(len(dataloader), steps, c.sample_every)
    with recorder(folder, "jax", meta, keep_every=c.keep_every, keep_steps=keep_steps) as rec:
        for step, i, _, (real,) in epochs(dataloader, steps):
            # The batch as NumPy: a jitted call takes arrays as they are, where jnp.asarray would be an eager
            # computation of its own, at every step. The step draws its latents itself (jax_drawing_step).
            carry, scalars = train_step(*carry, real)
            values: dict[str, Any] = {k: float(v) for k, v in scalars.items()}
            if i % c.sample_every == 0:
                pD, bD, optD, pG, bG, optG = carry
                fake, bG = sample(pG, bG, fixed_noise)
                carry = (pD, bD, optD, pG, bG, optG)
                values["fake_fixed"] = np.asarray(fake)
            modules = None
            if kept(step, steps, c.keep_every):
                pD, bD, _, pG, bG, _ = carry
                values["netG"], values["netD"] = state(pG, bG), state(pD, bD)
                modules = {"netG": nnx.merge(graphG, pG, bG), "netD": nnx.merge(graphD, pD, bD)}
                if rec is not None:  # the Adams' states under torch's state_dict names
                    import parity

                    adam = {"lr": c.lr, "betas": (c.beta1, 0.999)}
                    for name, net, opt_state, rows in (("optD", "netD", carry[2], _discriminator_layers(c)),
                                                       ("optG", "netG", carry[5], _generator_layers(c))):
                        modules[name] = parity.optimizer_record(opt_state, modules[net], name="Adam",
                                                                hyperparameters=adam, param_names=_torch_order(rows))
            record(records, rec, step, values, modules)
    return records


def main(argv: list[str] | None = None) -> None:
    """``python -m examples.loops.dcgan --framework torch|jax --out DIR --steps N --dtype float64``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True, help="the recording's folder (parity.Recorder)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--draw-dtype", choices=("float64", "float32"), default=None,
                        help="the dtype random numbers are drawn in (float32 with --dtype float64: "
                             "a float32 run's twin)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = train_torch if args.framework == "torch" else train_jax
    records = train(args.out, steps=args.steps, dtype=args.dtype, seed=args.seed, draw_dtype=args.draw_dtype)
    last = records[-1]
    print(f"[{len(records)} steps] Loss_D: {last['loss_D']:.4f} Loss_G: {last['loss_G']:.4f} D(x): {last['D_x']:.4f} "
          f"D(G(z)): {last['D_G_z1']:.4f} / {last['D_G_z2']:.4f}")


if __name__ == "__main__":
    main()
