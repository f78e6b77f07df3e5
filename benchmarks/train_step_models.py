"""The models, data, losses and optimizers ``train_step.py`` times, each written the way a user writes it.

Every case is a dict in :data:`CASES`; :func:`torch_setup` and :func:`jax_setup`
build its two sides from the same seed (the JAX side then loads torch's
weights, so both start equal):

- ``lenet_b256``, ``resnet18_b32_64``, ``resnet18_b4_224``: ``torch_ref.models`` /
  ``jax_impl.models``, CrossEntropyLoss, SGD(lr=0.01, momentum=0.9);
- ``mnist_b64``: the PyTorch MNIST example's network (``examples/mnist_net.py``),
  NLLLoss, its dropouts on with torch's masks on both sides;
- ``gpt_d128_t64``, ``gpt_d384_t256``: a GPT-style character LM
  (``examples/char_gpt.py``: token and position embeddings, pre-norm causal
  ``TransformerEncoderLayer`` blocks, tied head), dropout 0.1, AdamW(lr=3e-4,
  weight_decay=0.1), ``clip_grad_norm_(1.0)``;
- ``vit_tiny_b32_32``: ViT-Ti/4 on 32x32 RGB (``examples/vit_tiny.py`` at
  dim 192, depth 12, 3 heads, MLP 768; torchvision's dropout 0), AdamW(lr=1e-3,
  weight_decay=0.05), ``clip_grad_norm_(1.0)``;
- ``lstm_lm_b32_35``: the word-language-model example's ``RNNModel``
  (embedding 256, 2-layer ``nn.LSTM`` of 256 with dropout 0.2, decoder to a
  10,000-word vocabulary, log-softmax, NLLLoss), batch 32 x 35 steps of
  truncated BPTT, ``clip_grad_norm_(0.25)``, SGD(lr=20) as its update;
- ``dcgan_b32_32``: the DCGAN example's Generator and Discriminator
  (``examples/loops/dcgan.py``: nz 100, ngf = ndf = 64) at 32x32 RGB, batch
  32; one step is the example's discriminator update (real and fake
  batches, one Adam step) and its generator update (another Adam step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

LR, MOMENTUM = 0.01, 0.9

CASES: dict[str, dict[str, Any]] = {
    "lenet_b256": dict(model="lenet", batch=256, image=32, classes=10, memory_batches=(64, 256, 1024)),
    "resnet18_b32_64": dict(model="resnet18", batch=32, image=64, classes=10, memory_batches=(8, 32, 64)),
    "resnet18_b4_224": dict(model="resnet18", batch=4, image=224, classes=1000, memory_batches=(2, 4, 8)),
    "mnist_b64": dict(model="mnist", batch=64, image=28, classes=10, channels=1, loss="NLLLoss",
                      memory_batches=(16, 64, 256)),
    "gpt_d128_t64": dict(model="gpt", batch=16, tokens=64, vocab=96, dim=128, depth=4, heads=4, dropout=0.1,
                         optimizer="adamw", lr=3e-4, weight_decay=0.1, clip=1.0, memory_batches=(8, 16, 32)),
    "gpt_d384_t256": dict(model="gpt", batch=8, tokens=256, vocab=96, dim=384, depth=6, heads=6, dropout=0.1,
                          optimizer="adamw", lr=3e-4, weight_decay=0.1, clip=1.0, memory_batches=(4, 8, 16)),
    "vit_tiny_b32_32": dict(model="vit", batch=32, image=32, classes=10, patch=4, dim=192, depth=12, heads=3,
                            dropout=0.0, optimizer="adamw", lr=1e-3, weight_decay=0.05, clip=1.0,
                            memory_batches=(8, 32, 64)),
    "lstm_lm_b32_35": dict(model="lstm_lm", batch=32, tokens=35, vocab=10000, dim=256, depth=2, dropout=0.2,
                           loss="NLLLoss", optimizer="sgd", lr=20.0, momentum=0.0, clip=0.25,
                           memory_batches=(8, 32, 64)),
    "dcgan_b32_32": dict(model="dcgan", batch=32, image=32, nz=100, width=64, lr=2e-4, memory_batches=()),
}


def data(case: dict[str, Any], batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The batch ``(x, y)``: images and labels, token ids and next tokens, or DCGAN's images and latents."""
    rng = np.random.default_rng(0)
    n = batch or case["batch"]
    if case["model"] == "gpt":
        ids = rng.integers(0, case["vocab"], (n, case["tokens"] + 1))
        return ids[:, :-1].copy(), ids[:, 1:].copy()
    if case["model"] == "lstm_lm":  # time-major, as the example's batchify / get_batch
        ids = rng.integers(0, case["vocab"], (case["tokens"] + 1, n))
        return ids[:-1].copy(), ids[1:].reshape(-1).copy()
    if case["model"] == "dcgan":
        x = np.tanh(rng.standard_normal((n, 3, case["image"], case["image"]), dtype=np.float32))
        return x, rng.standard_normal((n, case["nz"], 1, 1), dtype=np.float32)
    x = rng.standard_normal((n, case.get("channels", 3), case["image"], case["image"]), dtype=np.float32)
    return x, rng.integers(0, case["classes"], n).astype(np.int64)


def _dcgan_config(case: dict[str, Any]) -> Any:
    from examples.loops.dcgan import Config

    return Config(nz=case["nz"], ngf=case["width"], ndf=case["width"], nc=3, image_size=case["image"],
                  batch_size=case["batch"], lr=case["lr"])


# ----------------------------------------------------------------------------------------------- torch


def torch_lstm_lm(case: dict[str, Any]) -> Any:
    """The word-language-model example's ``RNNModel`` (LSTM, untied), its hidden state starting at zero."""
    import torch
    from torch import nn

    class RNNModel(nn.Module):
        def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float) -> None:
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            emb = self.drop(self.encoder(input))
            output, _ = self.rnn(emb)
            decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
            return torch.nn.functional.log_softmax(decoded, dim=1)

    return RNNModel(case["vocab"], case["dim"], case["dim"], case["depth"], case["dropout"])


def torch_model(case: dict[str, Any]) -> Any:
    """The case's torch model, built after ``torch.manual_seed(0)``."""
    import torch

    from torch_ref import models

    torch.manual_seed(0)
    kind = case["model"]
    if kind == "lenet":
        return models.LeNet(num_classes=case["classes"], in_channels=3, image_size=case["image"])
    if kind == "mnist":
        from examples.mnist_net import Net

        return Net(image_size=case["image"])
    if kind == "gpt":
        from examples.char_gpt import CharGPT

        return CharGPT(vocab_size=case["vocab"], block_size=case["tokens"], dim=case["dim"], depth=case["depth"],
                       heads=case["heads"], mlp_dim=4 * case["dim"], dropout=case["dropout"])
    if kind == "vit":
        from examples.vit_tiny import ViTTiny

        return ViTTiny(image_size=case["image"], patch_size=case["patch"], in_channels=3,
                       num_classes=case["classes"], dim=case["dim"], depth=case["depth"], heads=case["heads"],
                       mlp_dim=4 * case["dim"], dropout=case["dropout"])
    if kind == "lstm_lm":
        return torch_lstm_lm(case)
    return models.resnet18(num_classes=case["classes"])


def torch_optimizer(case: dict[str, Any], params: Any) -> Any:
    import torch

    if case.get("optimizer") == "adamw":
        return torch.optim.AdamW(params, lr=case["lr"], weight_decay=case["weight_decay"])
    return torch.optim.SGD(params, lr=case.get("lr", LR), momentum=case.get("momentum", MOMENTUM))


def torch_setup(case: dict[str, Any], x: np.ndarray, y: np.ndarray, device: Any, sync: Any,
                compiled: bool = False) -> tuple[dict[str, Any], Any]:
    """``{"train", "infer"}`` closures of the torch side (eager, or with ``torch.compile`` on the models),
    and its model(s) (whose weights the JAX side copies)."""
    import torch

    if case["model"] == "dcgan":
        return _torch_dcgan(case, x, y, device, sync, compiled)
    model = torch_model(case).to(device)
    run = torch.compile(model) if compiled else model
    opt = torch_optimizer(case, model.parameters())
    loss_fn = getattr(torch.nn, case.get("loss", "CrossEntropyLoss"))()
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    clip = case.get("clip")

    def train() -> None:
        model.train()
        opt.zero_grad()
        loss_fn(run(tx), ty).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sync()

    def infer() -> None:
        model.eval()
        with torch.no_grad():
            run(tx)
        sync()

    return {"train": train, "infer": infer}, model


def _torch_dcgan(case: dict[str, Any], x: np.ndarray, z: np.ndarray, device: Any, sync: Any,
                 compiled: bool) -> tuple[dict[str, Any], Any]:
    """The DCGAN example's loop body (``examples/loops/dcgan.py``'s torch side) on a fixed batch and latents."""
    import torch

    from examples.loops.dcgan import FAKE_LABEL, REAL_LABEL, torch_networks

    c = _dcgan_config(case)
    Generator, Discriminator, weights_init = torch_networks(c)
    torch.manual_seed(0)
    netG, netD = Generator().to(device), Discriminator().to(device)
    netG.apply(weights_init)
    netD.apply(weights_init)
    runG, runD = (torch.compile(netG), torch.compile(netD)) if compiled else (netG, netD)
    criterion = torch.nn.BCELoss()
    optD = torch.optim.Adam(netD.parameters(), lr=c.lr, betas=(c.beta1, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=c.lr, betas=(c.beta1, 0.999))
    real, noise = torch.from_numpy(x).to(device), torch.from_numpy(z).to(device)

    def train() -> None:
        netG.train()
        netD.train()
        netD.zero_grad()
        label = torch.full((real.size(0),), REAL_LABEL, dtype=real.dtype, device=device)
        criterion(runD(real), label).backward()
        fake = runG(noise)
        label.fill_(FAKE_LABEL)
        criterion(runD(fake.detach()), label).backward()
        optD.step()
        netG.zero_grad()
        label.fill_(REAL_LABEL)
        criterion(runD(fake), label).backward()
        optG.step()
        sync()

    def infer() -> None:  # sampling: the generator in eval mode
        netG.eval()
        with torch.no_grad():
            runG(noise)
        sync()

    return {"train": train, "infer": infer}, (netG, netD)


# ------------------------------------------------------------------------------------------------- JAX


def jax_lstm_lm(case: dict[str, Any]) -> Any:
    """:func:`torch_lstm_lm` on ``jax_impl.nn``."""
    import jax_impl.nn as jnn
    import jax_impl.nn.functional as JF

    class RNNModel(jnn.Module):
        def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float) -> None:
            self.ntoken = ntoken
            self.drop = jnn.Dropout(dropout)
            self.encoder = jnn.Embedding(ntoken, ninp)
            self.rnn = jnn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = jnn.Linear(nhid, ntoken)

        def __call__(self, input: Any) -> Any:
            emb = self.drop(self.encoder(input))
            output, _ = self.rnn(emb)
            decoded = self.decoder(self.drop(output)).reshape(-1, self.ntoken)
            return JF.log_softmax(decoded, dim=1)

    return RNNModel(case["vocab"], case["dim"], case["dim"], case["depth"], case["dropout"])


def jax_model(case: dict[str, Any]) -> Any:
    """The case's ``jax_impl`` model (its weights are then loaded from the torch model's)."""
    from flax import nnx

    from jax_impl import models

    rngs = nnx.Rngs(0)
    kind = case["model"]
    if kind == "lenet":
        return models.LeNet(num_classes=case["classes"], in_channels=3, image_size=case["image"], rngs=rngs)
    if kind == "mnist":
        from examples.mnist_net import JaxNet

        return JaxNet(image_size=case["image"])
    if kind == "gpt":
        from examples.char_gpt import JaxCharGPT

        return JaxCharGPT(vocab_size=case["vocab"], block_size=case["tokens"], dim=case["dim"], depth=case["depth"],
                          heads=case["heads"], mlp_dim=4 * case["dim"], dropout=case["dropout"])
    if kind == "vit":
        from examples.vit_tiny import JaxViTTiny

        return JaxViTTiny(image_size=case["image"], patch_size=case["patch"], in_channels=3,
                          num_classes=case["classes"], dim=case["dim"], depth=case["depth"], heads=case["heads"],
                          mlp_dim=4 * case["dim"], dropout=case["dropout"])
    if kind == "lstm_lm":
        return jax_lstm_lm(case)
    return models.resnet18(num_classes=case["classes"], rngs=rngs)


def jax_optimizer(case: dict[str, Any]) -> Any:
    from jax_impl import optim

    if case.get("optimizer") == "adamw":
        return optim.adamw(lr=case["lr"], weight_decay=case["weight_decay"])
    return optim.sgd(lr=case.get("lr", LR), momentum=case.get("momentum", MOMENTUM))


def jax_train_step(case: dict[str, Any], model: Any, *, donate: bool = True) -> tuple[Any, Any]:
    """``(state, x, y) -> (state, loss)`` and the initial state: ``jax_impl.train``'s step, what a user's loop
    runs (the model split once, the batch an argument, the state donated, ``tx.step``, the case's clip)."""
    from jax_impl import nn
    from jax_impl.train import init_train_state, train_step

    tx = jax_optimizer(case)
    graphdef, state = init_train_state(model, tx)
    step = train_step(graphdef, getattr(nn, case.get("loss", "CrossEntropyLoss"))(), tx, donate=donate,
                      clip_grad_norm=case.get("clip"))
    return step, state


def _load(jax_net: Any, torch_net: Any) -> None:
    from parity.convert import load_torch_state_dict

    load_torch_state_dict(jax_net, {k: v.detach().cpu() for k, v in torch_net.state_dict().items()})


def jax_setup(case: dict[str, Any], x: np.ndarray, y: np.ndarray, torch_model: Any) -> dict[str, Any]:
    """``{"train", "infer"}`` closures of the JAX side, starting from ``torch_model``'s weights."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl.train import eval_step

    if case["model"] == "dcgan":
        return _jax_dcgan(case, x, y, torch_model)
    model = jax_model(case)
    _load(model, torch_model)
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    step, state = jax_train_step(case, model)
    forward = eval_step(nnx.graphdef(model))
    infer_state = jax.tree.map(jnp.copy, state)  # the train step donates (deletes) its state's arrays
    box = {"state": state}

    def train() -> None:
        box["state"], loss = step(box["state"], jx, jy)
        jax.block_until_ready(loss)

    def infer() -> None:
        jax.block_until_ready(forward(infer_state, jx))

    return {"train": train, "infer": infer}


def _jax_dcgan(case: dict[str, Any], x: np.ndarray, z: np.ndarray, torch_nets: Any) -> dict[str, Any]:
    """The DCGAN example's JAX step (``examples.loops.dcgan.jax_programs``: both updates in one jitted call)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from examples.loops.dcgan import JaxDiscriminator, JaxGenerator, jax_programs

    c = _dcgan_config(case)
    nets = []
    for network, torch_net in zip((JaxGenerator, JaxDiscriminator), torch_nets, strict=True):
        net = network(c, jnp.float32)
        _load(net, torch_net)
        graphdef, params, buffers = nnx.split(net, nnx.Param, ...)
        nets.append((graphdef, nnx.to_pure_dict(params), nnx.to_pure_dict(buffers)))  # as the example's loop
    (graphG, pG, bG), (graphD, pD, bD) = nets
    txD, txG, step, _ = jax_programs(graphG, graphD, c)
    box = {"carry": (pD, bD, txD.init(pD), pG, bG, txG.init(pG))}
    real, noise = jnp.asarray(x), jnp.asarray(z)
    sample_state = jax.tree.map(jnp.copy, (pG, bG))

    def eval_sample(p: Any, b: Any, latent: Any) -> Any:
        net = nnx.merge(graphG, p, b)
        net.eval()
        return net(latent)

    sample_eval = jax.jit(eval_sample)

    def train() -> None:
        box["carry"], scalars = step(*box["carry"], real, noise)
        jax.block_until_ready(scalars)

    def infer() -> None:
        jax.block_until_ready(sample_eval(*sample_state, noise))

    return {"train": train, "infer": infer}
