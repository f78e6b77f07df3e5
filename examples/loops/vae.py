"""VAE, pytorch/examples ``vae/main.py``'s loop, on torch (``train_torch``) and on JAX (``train_jax``).

The example (commit 77f55b912142)::

    model = VAE(); optimizer = optim.Adam(model.parameters(), lr=1e-3)
    for epoch in ...:
        train(epoch)   # per batch: zero_grad; recon, mu, logvar = model(data);
                       #   loss = BCE(recon, x, reduction='sum') + KLD; backward; step
        test(epoch)    # the held-out loss, summed over batches / len(dataset) (the forward draws noise too)
        sample = torch.randn(64, 20); sample = model.decode(sample)

with the reparameterisation ``z = mu + eps * std``, ``std = exp(0.5 logvar)``,
``eps = torch.randn_like(std)`` drawn inside every forward, and
``KLD = -0.5 * sum(1 + logvar - mu^2 - exp(logvar))``. Here the data are
scikit-learn's 8x8 digits (bundled, no download) flattened to 64 values in
[0, 1] instead of MNIST's 784: the training split in a shuffled
``DataLoader``, the held-out split in an ordered one; the layers are the
example's 400 hidden units and 20 latents.

The JAX side is written with ``jax_impl.nn`` (``flax.nnx``), its
``binary_cross_entropy``, ``jax_impl.optim.adam`` and ``jax_impl.data``'s
``DataLoader``; ``eps`` comes from ``jax_impl.random.staged.randn_like``
inside the jitted step (``jit_with_host_draws`` draws it on the host before
each call, in torch's order), the sample's latents from
``jax_impl.random.randn``.

Each step records ``loss``; every ``keep_every`` steps (and the last) the
model's state dict (``model.fc1.weight``, ...), and in a recording Adam's
state (``optimizer.state.0.exp_avg``, ...); at each epoch's last step
``test_loss`` and the decoded ``sample``.

Run: ``python -m examples.loops.vae --framework jax --out runs/vae-jax --steps 50 --dtype float64``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

import numpy as np

import jax_impl.nn as jnn
from examples.loops.recording import epochs, kept, record, recorder

__all__ = ["Config", "JaxVAE", "digits", "main", "torch_vae", "train_jax", "train_torch"]


@dataclasses.dataclass(frozen=True)
class Config:
    """The example's options (batch 128, Adam lr 1e-3, 400 hidden units, 20 latents) on 64-pixel digits."""

    features: int = 64
    hidden: int = 400
    latent: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    samples: int = 64  # the example's sample = torch.randn(64, 20) after each epoch
    keep_every: int = 10  # the model's state is recorded at these steps and at the last


def digits(train: bool) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits flattened, float32 ``(N, 64)`` in [0, 1], and their labels: the training split
    (``train=True``, 1438 images) or the held-out one (359), split as ``jax_impl.data.datasets.digits``."""
    from jax_impl.data.datasets import digits_arrays, split_indices

    x, y = digits_arrays()
    index = split_indices(len(x), 0.2, 0)[0 if train else 1]
    return np.ascontiguousarray(x[index].reshape(len(index), -1)), y[index]


# ----------------------------------------------------------------------------------------------- torch


def torch_vae(c: Config, draw_dtype: Any) -> Any:
    """The example's ``VAE`` at ``c``'s sizes; ``randn_like`` draws in ``draw_dtype`` (the model's by default)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(c.features, c.hidden)
            self.fc21 = nn.Linear(c.hidden, c.latent)
            self.fc22 = nn.Linear(c.hidden, c.latent)
            self.fc3 = nn.Linear(c.latent, c.hidden)
            self.fc4 = nn.Linear(c.hidden, c.features)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std, dtype=draw_dtype).to(std.dtype)
            return mu + eps * std

        def decode(self, z):
            h3 = F.relu(self.fc3(z))
            return torch.sigmoid(self.fc4(h3))

        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, c.features))
            z = self.reparameterize(mu, logvar)
            return self.decode(z), mu, logvar

    return VAE


def train_torch(folder: Any = None, *, steps: int = 50, dtype: str = "float64", seed: int = 1,
                config: Config = Config(), draw_dtype: str | None = None) -> list[dict[str, Any]]:
    """The example's loop on torch; returns one dict of recorded values per step (and records to ``folder``).

    Args:
      folder: a ``parity.Recorder`` folder, or ``None`` to record nothing on disk.
      steps: optimizer steps; an epoch's test and sample run after its last step.
      dtype: ``"float64"`` or ``"float32"``: the model, data and losses.
      seed: ``torch.manual_seed(seed)`` (the example's ``--seed``, 1 by default).
      config: sizes and hyperparameters.
      draw_dtype: the dtype the random numbers (initial weights, noise, samples) are drawn in before they
        are cast to ``dtype``; ``dtype`` by default. A float64 run drawing float32 numbers is a float32
        run's exact twin, the reference of torch's float32 floor.
    """
    import torch
    import torch.utils.data
    from torch import optim
    from torch.nn import functional as F

    c = config
    cdt, ddt = getattr(torch, dtype), getattr(torch, draw_dtype or dtype)
    torch.manual_seed(seed)
    train_set, test_set = ((torch.from_numpy(x).to(cdt), torch.from_numpy(y)) for x, y in (digits(True), digits(False)))
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*train_set),
                                               batch_size=c.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*test_set),
                                              batch_size=c.batch_size, shuffle=False)
    default = torch.get_default_dtype()
    torch.set_default_dtype(ddt)  # the layers' initialisation draws in the draw dtype
    try:
        model = torch_vae(c, ddt)()
    finally:
        torch.set_default_dtype(default)
    model.to(cdt)
    optimizer = optim.Adam(model.parameters(), lr=c.lr)

    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, c.features), reduction="sum")
        KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return BCE + KLD

    def test() -> float:
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for data, _ in test_loader:
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
        return test_loss / len(test_loader.dataset)

    records: list[dict[str, Any]] = []
    meta = {"example": "vae", "dtype": dtype, "seed": seed, "config": dataclasses.asdict(c)}
    keep_steps = range(len(train_loader) - 1, steps, len(train_loader))  # the epochs' ends: their samples
    with recorder(folder, "torch", meta, keep_every=c.keep_every, keep_steps=keep_steps) as rec:
        for step, i, last, (data, _) in epochs(train_loader, steps):
            if i == 0:
                model.train()
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            optimizer.step()
            values: dict[str, Any] = {"loss": loss.item()}
            if last:
                values["test_loss"] = test()
                with torch.no_grad():
                    sample = torch.randn(c.samples, c.latent, dtype=ddt).to(cdt)
                    values["sample"] = model.decode(sample).numpy()
            modules = None
            if kept(step, steps, c.keep_every):
                values["model"] = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
                modules = {"model": model, "optimizer": optimizer}
            record(records, rec, step, values, modules)
    return records


# ------------------------------------------------------------------------------------------------- JAX


class JaxVAE(jnn.Module):
    """The example's ``VAE`` on ``jax_impl.nn``; ``eps`` is ``jax_impl.random.staged.randn_like(std)``."""

    def __init__(self, config: Config, dtype: Any, draw_dtype: Any = None) -> None:
        c = config
        self.features = c.features
        self.draw_dtype = draw_dtype
        self.fc1 = jnn.Linear(c.features, c.hidden, dtype=dtype)
        self.fc21 = jnn.Linear(c.hidden, c.latent, dtype=dtype)
        self.fc22 = jnn.Linear(c.hidden, c.latent, dtype=dtype)
        self.fc3 = jnn.Linear(c.latent, c.hidden, dtype=dtype)
        self.fc4 = jnn.Linear(c.hidden, c.features, dtype=dtype)

    def encode(self, x: Any) -> tuple[Any, Any]:
        h1 = jnn.functional.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu: Any, logvar: Any) -> Any:
        import jax.numpy as jnp

        from jax_impl.random import staged

        std = jnp.exp(0.5 * logvar)
        eps = staged.randn_like(std, dtype=self.draw_dtype).astype(std.dtype)
        return mu + eps * std

    def decode(self, z: Any) -> Any:
        h3 = jnn.functional.relu(self.fc3(z))
        return jnn.functional.sigmoid(self.fc4(h3))

    def __call__(self, x: Any) -> tuple[Any, Any, Any]:
        mu, logvar = self.encode(x.reshape(-1, self.features))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def train_jax(folder: Any = None, *, steps: int = 50, dtype: str = "float64", seed: int = 1,
              config: Config = Config(), draw_dtype: str | None = None) -> list[dict[str, Any]]:
    """The example's loop on ``jax_impl`` and ``flax.nnx``; the arguments and records are :func:`train_torch`'s."""
    import jax

    with jax.enable_x64(dtype == "float64" or draw_dtype == "float64"):
        return _train_jax(folder, steps, dtype, seed, config, draw_dtype or dtype)


@functools.lru_cache(maxsize=8)
def _jax_programs(graphdef: Any, c: Config) -> tuple[Any, Any, Any, Any]:
    """Adam, the jitted train step, test loss and decoder of the model ``graphdef``, kept per graph and config
    so that a second run in the same process reuses the compiled step."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl import optim
    from jax_impl.nn import functional as JF
    from jax_impl.random.host_draws import jit_with_host_draws

    tx = optim.adam(lr=c.lr)

    def loss_function(recon_x, x, mu, logvar):
        BCE = JF.binary_cross_entropy(recon_x, x.reshape(-1, c.features), reduction="sum")
        KLD = -0.5 * jnp.sum(1 + logvar - mu**2 - jnp.exp(logvar))
        return BCE + KLD

    def loss_of(params, data):
        recon_batch, mu, logvar = nnx.merge(graphdef, params)(data)
        return loss_function(recon_batch, data, mu, logvar)

    def train_step(params, opt_state, data):
        loss, grads = jax.value_and_grad(loss_of)(params, data)
        params, opt_state = tx.step(grads, opt_state, params)
        return params, opt_state, loss

    # The noise eps is drawn on the host before each call, from torch's stream (staged.randn_like).
    train_step = jit_with_host_draws(train_step, key_argnums=(2,))
    test_loss_of = jit_with_host_draws(loss_of, key_argnums=(1,))
    decode = jax.jit(lambda params, z: nnx.merge(graphdef, params).decode(z))
    return tx, train_step, test_loss_of, decode


def _train_jax(folder: Any, steps: int, dtype: str, seed: int, c: Config, draw_dtype: str) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import jax_impl.data as jdata
    import jax_impl.random as jr

    cdt, ddt = jnp.dtype(dtype), jnp.dtype(draw_dtype)
    jr.manual_seed(seed)
    (x_train, y_train), (x_test, y_test) = digits(True), digits(False)
    train_loader = jdata.DataLoader(jdata.TensorDataset(x_train.astype(cdt), y_train), batch_size=c.batch_size,
                                    shuffle=True)
    test_loader = jdata.DataLoader(jdata.TensorDataset(x_test.astype(cdt), y_test), batch_size=c.batch_size,
                                   shuffle=False)
    graphdef, params = nnx.split(JaxVAE(c, ddt, ddt), nnx.Param)
    params = jax.tree.map(lambda a: a.astype(cdt), params)
    tx, train_step, test_loss_of, decode = _jax_programs(graphdef, c)
    opt_state = tx.init(params)

    def test(params) -> float:
        test_loss = 0
        for data, _ in test_loader:
            test_loss += float(test_loss_of(params, data))
        return test_loss / len(test_loader.dataset)

    def state(params) -> dict[str, np.ndarray]:
        return {".".join(map(str, path)): np.asarray(v[...]) for path, v in nnx.to_flat_state(params)}

    records: list[dict[str, Any]] = []
    meta = {"example": "vae", "dtype": dtype, "seed": seed, "config": dataclasses.asdict(c)}
    keep_steps = range(len(train_loader) - 1, steps, len(train_loader))  # the epochs' ends: their samples
    with recorder(folder, "jax", meta, keep_every=c.keep_every, keep_steps=keep_steps) as rec:
        for step, i, last, (data, _) in epochs(train_loader, steps):
            # The batch as NumPy: a jitted call takes it as it is (jnp.asarray would be an eager computation).
            params, opt_state, loss = train_step(params, opt_state, data)
            values: dict[str, Any] = {"loss": float(loss)}
            if last:
                values["test_loss"] = test(params)
                sample = jnp.asarray(jr.randn(c.samples, c.latent, dtype=ddt), cdt)
                values["sample"] = np.asarray(decode(params, sample))
            modules = None
            if kept(step, steps, c.keep_every):
                values["model"] = state(params)
                modules = {"model": nnx.merge(graphdef, params)}
                if rec is not None:  # Adam's state under torch's state_dict names
                    import parity

                    # torch's parameters() order (a module nnx.merge rebuilt lists its attributes sorted)
                    layers = ("fc1", "fc21", "fc22", "fc3", "fc4")
                    order = [f"{layer}.{p}" for layer in layers for p in ("weight", "bias")]
                    modules["optimizer"] = parity.optimizer_record(opt_state, modules["model"], name="Adam",
                                                                   hyperparameters={"lr": c.lr}, param_names=order)
            record(records, rec, step, values, modules)
    return records


def main(argv: list[str] | None = None) -> None:
    """``python -m examples.loops.vae --framework torch|jax --out DIR --steps N --dtype float64``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True, help="the recording's folder (parity.Recorder)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--draw-dtype", choices=("float64", "float32"), default=None,
                        help="the dtype random numbers are drawn in (float32 with --dtype float64: "
                             "a float32 run's twin)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    train = train_torch if args.framework == "torch" else train_jax
    records = train(args.out, steps=args.steps, dtype=args.dtype, seed=args.seed, draw_dtype=args.draw_dtype)
    print(f"[{len(records)} steps] loss: {records[-1]['loss'] / Config().batch_size:.4f} per image (last batch)")


if __name__ == "__main__":
    main()
