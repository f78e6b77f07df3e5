"""pytorch/examples' time-sequence prediction (``time_sequence_prediction/``), in torch and in JAX.

The example's ``Sequence`` (two ``LSTMCell(51)`` stacked, a ``Linear(51, 1)``
read-out, unrolled over the time steps and, for prediction, ``future`` steps
fed back its own output) learns sine waves with ``LBFGS(lr=0.8)``:

- the data is ``generate_sine_wave.py``'s at a smaller size: ``N`` waves
  ``sin((t + k) / T)`` of ``L`` points, ``t = 0 .. L-1``, each shifted by
  ``k ~ randint(-4T, 4T)`` from ``np.random.seed(2)``; the first 3 waves are
  the test set, the rest the training set, each point predicting the next;
- ``torch.manual_seed(seed)`` (the example's 0), then ``Sequence()`` and
  ``.double()`` (the initial draws are float32 draws, cast);
- one step is one ``optimizer.step(closure)``: LBFGS's default ``max_iter=20``
  iterations, each evaluating the closure (``MSELoss`` of the one-step
  predictions, ``backward``); then a ``no_grad`` prediction of the test
  waves with ``future`` steps, whose loss on the known part is the test loss.

float64, as the example runs. ``dtype="float32"`` runs the same loop in
float32: the example builds its zero states as ``dtype=torch.double``;
here they take the input's dtype, which is the same in a float64 run.

The JAX side evaluates the closure as one jitted ``jax.value_and_grad`` (the
time loop a ``jax.lax.scan`` over ``jax_impl.nn.LSTMCell`` steps) and runs
``jax_impl.optim.lbfgs``'s ``tx.step(closure, state, params)`` over the
parameters in torch's ``parameters()`` order, which calls the closure as
often and in the same order as torch's ``LBFGS.step``.

``python -m examples.loops.time_sequence --framework torch|jax --out DIR --steps N --dtype float64``
records a run with ``parity.Recorder``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from examples.loops.recording import kept, record, recorder

__all__ = ["CONFIG", "PARAMETER_NAMES", "main", "sine_waves", "train_jax", "train_torch"]

# generate_sine_wave.py's T; N and L shrunk from 100 and 1000; the example's hidden size 51 and LBFGS lr 0.8.
CONFIG = {"T": 20, "L": 60, "N": 8, "hidden": 51, "lr": 0.8, "future": 20, "record_every": 1}

# torch's `Sequence().parameters()` order: LBFGS flattens the parameters into one vector in this order.
PARAMETER_NAMES = [f"{cell}.{w}" for cell in ("lstm1", "lstm2") for w in ("weight_ih", "weight_hh", "bias_ih",
                                                                          "bias_hh")] + ["linear.weight",
                                                                                         "linear.bias"]


def sine_waves(T: int = CONFIG["T"], L: int = CONFIG["L"], N: int = CONFIG["N"]) -> np.ndarray:
    """``generate_sine_wave.py``'s data, ``(N, L)`` float64: ``sin(x / 1.0 / T)`` with
    ``x = arange(L) + randint(-4T, 4T, N)`` after ``np.random.seed(2)`` (a private ``RandomState(2)``, the
    same numbers without touching NumPy's global state)."""
    rng = np.random.RandomState(2)
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + rng.randint(-4 * T, 4 * T, N).reshape(N, 1)
    return np.sin(x / 1.0 / T).astype("float64")


def _splits(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The example's ``input, target, test_input, test_target`` in ``dtype``."""
    data = sine_waves().astype(dtype)
    return data[3:, :-1], data[3:, 1:], data[:3, :-1], data[:3, 1:]


def train_torch(folder: str | None = None, *, steps: int = 15, dtype: str = "float64", seed: int = 0,
                record_every: int = CONFIG["record_every"]) -> list[dict[str, Any]]:
    """The example's loop in torch for ``steps`` LBFGS steps (the example's default is 15); one history entry
    per step.

    Each entry holds ``loss`` (the step's first closure value, what ``step`` returns), ``closure_losses``
    (every closure value of the step, in order), ``func_evals`` (LBFGS's running count) and ``test_loss``;
    every ``record_every`` steps and the last add the model's state dict as ``seq.<key>`` (numpy). With
    ``folder`` the same is recorded there with ``parity.Recorder`` (tensors every ``record_every`` steps).
    """
    import torch
    import torch.nn as nn
    import torch.optim as optim

    hidden = CONFIG["hidden"]

    class Sequence(nn.Module):
        """The example's ``Sequence``, its zero states in the input's dtype (``torch.double`` in the example)."""

        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, hidden)
            self.lstm2 = nn.LSTMCell(hidden, hidden)
            self.linear = nn.Linear(hidden, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = torch.zeros(input.size(0), hidden, dtype=input.dtype)
            c_t = torch.zeros(input.size(0), hidden, dtype=input.dtype)
            h_t2 = torch.zeros(input.size(0), hidden, dtype=input.dtype)
            c_t2 = torch.zeros(input.size(0), hidden, dtype=input.dtype)

            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for i in range(future):
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            outputs = torch.cat(outputs, dim=1)
            return outputs

    torch.manual_seed(seed)
    input, target, test_input, test_target = (torch.from_numpy(a) for a in _splits(dtype))
    seq = Sequence().to(getattr(torch, dtype))
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=CONFIG["lr"])
    future = CONFIG["future"]

    records: list[dict[str, Any]] = []
    meta = {"example": "time_sequence", "dtype": dtype, "seed": seed, "config": CONFIG}
    with recorder(folder, "torch", meta, keep_every=record_every) as rec:
        for i in range(steps):
            closure_losses = []

            def closure():
                optimizer.zero_grad()
                out = seq(input)
                loss = criterion(out, target)
                closure_losses.append(loss.item())
                loss.backward()
                return loss

            loss = optimizer.step(closure)
            with torch.no_grad():
                pred = seq(test_input, future=future)
                test_loss = criterion(pred[:, :-future], test_target)
            values: dict[str, Any] = {
                "loss": loss.item(), "closure_losses": np.array(closure_losses),
                "func_evals": optimizer.state[optimizer.param_groups[0]["params"][0]]["func_evals"],
                "test_loss": test_loss.item()}
            modules = None
            if kept(i, steps, record_every):
                values["seq"] = {k: v.detach().numpy().copy() for k, v in seq.state_dict().items()}
                modules = {"seq": seq}
            record(records, rec, i, values, modules)
    return records


def _jax_model_class():
    """``Sequence`` on ``jax_impl.nn`` (defined on first use, so importing this module does not import jax)."""
    import jax
    import jax.numpy as jnp

    import jax_impl.nn as jnn

    hidden = CONFIG["hidden"]

    class Sequence(jnn.Module):
        """The example's ``Sequence``: the same cells, names and initial draws; the time loop a ``lax.scan``."""

        def __init__(self) -> None:
            self.lstm1 = jnn.LSTMCell(1, hidden)
            self.lstm2 = jnn.LSTMCell(hidden, hidden)
            self.linear = jnn.Linear(hidden, 1)

        def _cells(self, input_t, states):
            h_t, c_t, h_t2, c_t2 = states
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            return self.linear(h_t2), (h_t, c_t, h_t2, c_t2)

        def __call__(self, input, future: int = 0):
            zeros = jnp.zeros((input.shape[0], hidden), input.dtype)

            def known(states, input_t):
                output, states = self._cells(input_t, states)
                return states, output

            states, outputs = jax.lax.scan(known, (zeros,) * 4, input.T[:, :, None])

            def fed_back(carry, _):
                output, states = self._cells(*carry)
                return (output, states), output

            if future:
                _, more = jax.lax.scan(fed_back, (outputs[-1], states), None, length=future)
                outputs = jnp.concatenate([outputs, more])
            return outputs[:, :, 0].T  # torch.cat(outputs, dim=1): (N, steps)

    return Sequence


def train_jax(folder: str | None = None, *, steps: int = 15, dtype: str = "float64", seed: int = 0,
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
    import jax_impl.optim
    import jax_impl.random as jr

    jr.manual_seed(seed)
    input, target, test_input, test_target = (jnp.asarray(a) for a in _splits(dtype))
    seq = _jax_model_class()()
    graphdef, param_state = nnx.split(seq, nnx.Param)
    flat = nnx.to_flat_state(param_state)
    paths = {".".join(map(str, path)): (path, var) for path, var in flat}
    params = [paths[name][1][...].astype(dtype) for name in PARAMETER_NAMES]

    def model_of(params):
        state = nnx.from_flat_state([(paths[n][0], paths[n][1].replace(p)) for n, p in zip(PARAMETER_NAMES, params)])
        return nnx.merge(graphdef, state)

    def loss_fn(params):
        return JF.mse_loss(model_of(params)(input), target)

    def test_fn(params):
        pred = model_of(params)(test_input, future=CONFIG["future"])
        return JF.mse_loss(pred[:, :-CONFIG["future"]], test_target)

    value_and_grad = jax.jit(jax.value_and_grad(loss_fn))
    test_loss_of = jax.jit(test_fn)
    tx = jax_impl.optim.lbfgs(lr=CONFIG["lr"])
    opt_state = tx.init(params)

    records: list[dict[str, Any]] = []
    meta = {"example": "time_sequence", "dtype": dtype, "seed": seed, "config": CONFIG}
    with recorder(folder, "jax", meta, keep_every=record_every) as rec:
        for i in range(steps):
            closure_losses = []

            def closure(p):
                loss, grads = value_and_grad(p)
                closure_losses.append(float(loss))
                return loss, grads

            loss, params, opt_state = tx.step(closure, opt_state, params)
            values: dict[str, Any] = {"loss": float(loss), "closure_losses": np.array(closure_losses),
                                      "func_evals": opt_state.func_evals, "test_loss": float(test_loss_of(params))}
            modules = None
            if kept(i, steps, record_every):
                values["seq"] = {name: np.asarray(p) for name, p in zip(PARAMETER_NAMES, params)}
                nnx.update(seq, nnx.from_flat_state([(paths[n][0], paths[n][1].replace(jnp.asarray(p)))
                                                     for n, p in zip(PARAMETER_NAMES, params)]))
                modules = {"seq": seq}
            record(records, rec, i, values, modules)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--out", required=True, help="the run's folder (parity.Recorder)")
    parser.add_argument("--steps", type=int, default=15, help="LBFGS steps (the example runs 15)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = train_torch if args.framework == "torch" else train_jax
    records = train(args.out, steps=args.steps, dtype=args.dtype, seed=args.seed)
    last = records[-1]
    print(f"{args.framework}: {len(records)} LBFGS steps, {last['func_evals']} closure evaluations, "
          f"loss {last['loss']:.3e}, test loss {last['test_loss']:.3e}")


if __name__ == "__main__":
    main()
