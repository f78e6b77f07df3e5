"""pytorch/examples' word-level language model (``word_language_model/main.py``), in torch and in JAX.

The example's ``RNNModel`` with ``nn.LSTM`` (``Embedding -> Dropout -> LSTM
(dropout between layers) -> Dropout -> Linear -> log_softmax``, encoder and
decoder re-initialised ``U(-0.1, 0.1)``) at tiny sizes, trained on the
bundled text ``examples/data/tiny_text.txt`` as its ``main.py`` trains on
WikiText-2:

- the text is split into words per line, each line ending in ``<eos>``
  (``data.Corpus.tokenize``); the first 80% of the lines are the training
  text, the rest the validation text, one dictionary for both;
- ``batchify`` lays each text out as ``batch_size`` columns, ``get_batch``
  cuts ``bptt`` rows at a time (truncated back-propagation through time), and
  the hidden state carries over between batches, detached
  (``repackage_hidden``);
- one step is one batch: ``NLLLoss``, ``backward``,
  ``clip_grad_norm_(parameters, 0.25)``, then plain SGD by hand
  (``p.data.add_(p.grad, alpha=-lr)``);
- at the end of each pass over the training text the validation loss is
  computed in eval mode, and ``lr`` is divided by 4 when it does not improve
  on the best so far.

All randomness is torch's stream: the layers' initial weights and the three
dropout masks of each forward (embedding, between the LSTM layers, output),
which ``jax_impl.nn`` draws from ``jax_impl.random`` in torch's order. The
JAX side is one jitted step (forward, ``jax.value_and_grad``,
``jax_impl.nn.utils.clip_grad_norm_`` over the gradients in torch's
parameter order, ``p + (-lr) g`` as torch's ``add_`` rounds it), with the
masks drawn on the host before each call
(:func:`jax_impl.random.host_draws.jit_with_host_draws`).

``python -m examples.loops.word_lm --framework torch|jax --out DIR --steps N --dtype float64``
records a run with ``parity.Recorder``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from examples.loops.recording import kept, record, recorder

__all__ = ["CONFIG", "Dictionary", "batchify", "corpus", "get_batch", "main", "train_jax", "train_torch"]

TEXT = Path(__file__).resolve().parents[1] / "data" / "tiny_text.txt"

# The example's defaults where they fit a tiny text (lr 20, clip 0.25, dropout 0.2, 2 layers), sizes shrunk.
CONFIG = {"emsize": 32, "nhid": 32, "nlayers": 2, "dropout": 0.2, "lr": 20.0, "clip": 0.25, "batch_size": 8,
          "eval_batch_size": 4, "bptt": 10, "train_fraction": 0.8, "record_every": 10}


class Dictionary:
    """``data.Dictionary``: words to ids in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def corpus(train_fraction: float = CONFIG["train_fraction"]) -> tuple[np.ndarray, np.ndarray, Dictionary]:
    """``(train ids, validation ids, dictionary)`` of the bundled text, tokenised as ``data.Corpus`` does
    (``line.split() + ['<eos>']``), the first ``train_fraction`` of its lines for training."""
    lines = TEXT.read_text(encoding="utf8").splitlines(keepends=True)
    cut = int(len(lines) * train_fraction)
    dictionary = Dictionary()
    parts = []
    for part in (lines[:cut], lines[cut:]):
        ids = [dictionary.add_word(word) for line in part for word in line.split() + ["<eos>"]]
        parts.append(np.asarray(ids, np.int64))
    return parts[0], parts[1], dictionary


def batchify(data: np.ndarray, bsz: int) -> np.ndarray:
    """The example's ``batchify``: drop the remainder, ``(bsz, -1)``, transpose: ``(nbatch, bsz)`` columns."""
    nbatch = data.shape[0] // bsz
    return np.ascontiguousarray(data[:nbatch * bsz].reshape(bsz, -1).T)


def get_batch(source: np.ndarray, i: int, bptt: int) -> tuple[np.ndarray, np.ndarray]:
    """The example's ``get_batch``: ``bptt`` rows from ``i`` and the next word of each, flattened."""
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def _batch_starts(train_data: np.ndarray, bptt: int) -> list[int]:
    return list(range(0, train_data.shape[0] - 1, bptt))


def train_torch(folder: str | None = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
                record_every: int = CONFIG["record_every"]) -> list[dict[str, Any]]:
    """The example's loop in torch for ``steps`` batches; one history entry per step.

    Each entry holds ``loss``, ``grad_norm`` (``clip_grad_norm_``'s total norm) and ``lr`` (the rate the step
    used); the last step of each pass over the text adds ``val_loss``; every ``record_every`` steps and the
    last add the model's state dict as ``model.<key>`` (numpy). With ``folder`` the same is recorded there
    with ``parity.Recorder``, keeping tensors every ``record_every`` steps.
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RNNModel(nn.Module):
        """The example's ``model.RNNModel`` (``rnn_type='LSTM'``, untied)."""

        def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.init_weights()
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))

    def repackage_hidden(h):
        return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)

    cfg = CONFIG
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(seed)
    train_ids, valid_ids, dictionary = corpus()
    train_data = torch.from_numpy(batchify(train_ids, cfg["batch_size"]))
    val_data = torch.from_numpy(batchify(valid_ids, cfg["eval_batch_size"]))
    ntokens = len(dictionary)
    # Built in torch's default float32 (the initial draws are float32 draws), then cast, as `.to(device)` is.
    model = RNNModel(ntokens, cfg["emsize"], cfg["nhid"], cfg["nlayers"], cfg["dropout"]).to(torch_dtype)
    criterion = nn.NLLLoss()

    def get(source, i):
        data, target = get_batch(source.numpy(), i, cfg["bptt"])
        return torch.from_numpy(data), torch.from_numpy(target)

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(cfg["eval_batch_size"])
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, cfg["bptt"]):
                data, targets = get(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    records: list[dict[str, Any]] = []
    meta = {"example": "word_lm", "dtype": dtype, "seed": seed, "config": CONFIG}
    lr, best_val_loss, step = cfg["lr"], None, 0
    with recorder(folder, "torch", meta, keep_every=record_every) as rec:
        while step < steps:
            model.train()
            hidden = model.init_hidden(cfg["batch_size"])
            starts = _batch_starts(train_data.numpy(), cfg["bptt"])
            for batch, i in enumerate(starts):
                data, targets = get(train_data, i)
                model.zero_grad()
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
                loss = criterion(output, targets)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
                values: dict[str, Any] = {"loss": loss.item(), "grad_norm": grad_norm.item(), "lr": lr}
                if batch == len(starts) - 1:
                    val_loss = evaluate(val_data)
                    values["val_loss"] = val_loss
                    if not best_val_loss or val_loss < best_val_loss:
                        best_val_loss = val_loss
                    else:
                        lr /= 4.0
                modules = None
                if kept(step, steps, record_every):
                    values["model"] = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
                    modules = {"model": model}
                record(records, rec, step, values, modules)
                step += 1
                if step == steps:
                    break
    return records


def _jax_model_class():
    """``RNNModel`` on ``jax_impl.nn`` (defined on first use, so importing this module does not import jax)."""
    import jax_impl.nn as jnn
    import jax_impl.nn.functional as JF
    from jax_impl.nn import init

    class RNNModel(jnn.Module):
        """The example's ``RNNModel`` (LSTM): the same layers, names, initial draws and dropout masks."""

        def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.5) -> None:
            self.ntoken = ntoken
            self.drop = jnn.Dropout(dropout)  # torch's masks, from jax_impl.random's global generator
            self.encoder = jnn.Embedding(ntoken, ninp)
            self.rnn = jnn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = jnn.Linear(nhid, ntoken)
            self.init_weights()
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self) -> None:
            """``U(-0.1, 0.1)`` encoder and decoder weights (drawn in that order), zero decoder bias."""
            initrange = 0.1
            w = self.encoder.weight
            w[...] = init.uniform_(None, w.shape, w.dtype, -initrange, initrange)
            self.decoder.bias[...] = init.zeros_(None, self.decoder.bias.shape, self.decoder.bias.dtype)
            w = self.decoder.weight
            w[...] = init.uniform_(None, w.shape, w.dtype, -initrange, initrange)

        def __call__(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).reshape(-1, self.ntoken)
            return JF.log_softmax(decoded, dim=1), hidden

        def parameter_names(self) -> list[str]:
            """torch's ``named_parameters()`` order (the order ``clip_grad_norm_`` stacks the norms in)."""
            rnn = [f"rnn.{w}_l{layer}" for layer in range(self.nlayers)
                   for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            return ["encoder.weight", *rnn, "decoder.weight", "decoder.bias"]

    return RNNModel


def _flat_params(model: Any) -> dict[str, Any]:
    """The model's parameters under torch's dotted ``state_dict`` keys."""
    from flax import nnx

    return {".".join(map(str, path)): var[...] for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _set_params(model: Any, values: dict[str, Any]) -> None:
    from flax import nnx

    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        var.set_value(values[".".join(map(str, path))])


def train_jax(folder: str | None = None, *, steps: int = 50, dtype: str = "float64", seed: int = 0,
              record_every: int = CONFIG["record_every"]) -> list[dict[str, Any]]:
    """The example's loop on ``jax_impl``: the history :func:`train_torch` gives, from JAX."""
    import jax

    with jax.enable_x64(dtype == "float64"):
        return _train_jax(folder, steps, dtype, seed, record_every)


def _train_jax(folder, steps, dtype, seed, record_every):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    import jax_impl.nn.functional as JF
    import jax_impl.random as jr
    from jax_impl.kernels import TorchOps
    from jax_impl.nn.utils import clip_grad_norm_
    from jax_impl.random.host_draws import jit_with_host_draws

    cfg = CONFIG
    jdtype = jnp.dtype(dtype)
    jr.manual_seed(seed)
    train_ids, valid_ids, dictionary = corpus()
    train_data = batchify(train_ids, cfg["batch_size"])
    val_data = batchify(valid_ids, cfg["eval_batch_size"])
    ntokens = len(dictionary)
    model = _jax_model_class()(ntokens, cfg["emsize"], cfg["nhid"], cfg["nlayers"], cfg["dropout"])
    _set_params(model, {k: v.astype(jdtype) for k, v in _flat_params(model).items()})
    names = model.parameter_names()
    model.train()
    train_graph, _ = nnx.split(model)
    eval_graph, _ = nnx.split(model.eval())
    model.train()

    flat_state = nnx.to_flat_state(nnx.state(model, nnx.Param))

    def forward(graphdef, params, hidden, data):
        state = nnx.from_flat_state([(path, var.replace(params[".".join(map(str, path))]))
                                     for path, var in flat_state])
        return nnx.merge(graphdef, state)(data, hidden)

    def step_fn(params, hidden, data, targets, neg_lr):
        def loss_of(p):
            output, new_hidden = forward(train_graph, p, hidden, data)
            return JF.nll_loss(output, targets), new_hidden

        (loss, new_hidden), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        total_norm, clipped = clip_grad_norm_([grads[n] for n in names], cfg["clip"])
        new = {n: TorchOps.add(params[n], g, neg_lr) for n, g in zip(names, clipped)}
        return new, new_hidden, loss, total_norm

    def eval_fn(params, hidden, data, targets):
        output, new_hidden = forward(eval_graph, params, hidden, data)
        return JF.nll_loss(output, targets), new_hidden

    train_step = jit_with_host_draws(step_fn, key_argnums=(2,))
    eval_step = jax.jit(eval_fn)

    def init_hidden(bsz):
        zeros = jnp.zeros((cfg["nlayers"], bsz, cfg["nhid"]), jdtype)
        return (zeros, zeros)

    params = _flat_params(model)

    def evaluate(data_source):
        total_loss = 0.0
        hidden = init_hidden(cfg["eval_batch_size"])
        for i in range(0, data_source.shape[0] - 1, cfg["bptt"]):
            data, targets = get_batch(data_source, i, cfg["bptt"])
            loss, hidden = eval_step(params, hidden, data, targets)  # NumPy in: no eager copy per batch
            total_loss += len(data) * float(loss)
        return total_loss / (len(data_source) - 1)

    records: list[dict[str, Any]] = []
    meta = {"example": "word_lm", "dtype": dtype, "seed": seed, "config": CONFIG}
    lr, best_val_loss, step = cfg["lr"], None, 0
    with recorder(folder, "jax", meta, keep_every=record_every) as rec:
        while step < steps:
            hidden = init_hidden(cfg["batch_size"])
            starts = _batch_starts(train_data, cfg["bptt"])
            for batch, i in enumerate(starts):
                data, targets = get_batch(train_data, i, cfg["bptt"])
                # The batch and the step's -lr as NumPy: a jitted call takes them as they are, where each
                # jnp.asarray would be an eager computation of its own, at every step.
                params, hidden, loss, grad_norm = train_step(params, hidden, data, targets,
                                                             np.asarray(-lr, np.dtype(jdtype)))
                values: dict[str, Any] = {"loss": float(loss), "grad_norm": float(grad_norm), "lr": lr}
                if batch == len(starts) - 1:
                    val_loss = evaluate(val_data)
                    values["val_loss"] = val_loss
                    if not best_val_loss or val_loss < best_val_loss:
                        best_val_loss = val_loss
                    else:
                        lr /= 4.0
                modules = None
                if kept(step, steps, record_every):
                    _set_params(model, params)
                    values["model"] = {k: np.asarray(v) for k, v in params.items()}
                    modules = {"model": model}
                record(records, rec, step, values, modules)
                step += 1
                if step == steps:
                    break
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True, help="the run's folder (parity.Recorder)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = train_torch if args.framework == "torch" else train_jax
    records = train(args.out, steps=args.steps, dtype=args.dtype, seed=args.seed)
    last = records[-1]
    print(f"{args.framework}: {len(records)} steps, last loss {last['loss']:.6f} (ppl {math.exp(last['loss']):.2f})")


if __name__ == "__main__":
    main()
