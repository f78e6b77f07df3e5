"""Held-out evaluation, once for every runner: each side's predicted classes, then the accuracies.

The single-device runner (:mod:`parity.runner`) evaluates its live models
over the held-out loaders; the data-parallel one
(:mod:`parity.parallel_runner`) loads rank 0's and replica 0's snapshots
into a model of each side and evaluates those. Both call
:func:`torch_predictions` and :func:`jax_predictions`, so a prediction is
the same computation whichever runner made it: the model in eval mode
(BatchNorm's running statistics, no dropout), under ``train.autocast`` when
the run trains with it, ``argmax`` over the class dimension; and
:func:`parity.measure.accuracies` turns them into the report's columns.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from parity.measure import input_array
from parity.torch_step import autocast_context, model_input

__all__ = ["jax_predictions", "torch_predictions"]


def torch_predictions(model: torch.nn.Module, inputs: Iterable[Any], dtype: torch.dtype,
                      autocast: str | None = None) -> np.ndarray:
    """torch's predicted class per sample: ``model.eval()``, then ``model(x).argmax(1)`` under ``no_grad``.

    Args:
      model: the torch model; it is left in eval mode.
      inputs: batches of inputs (tensors or arrays), in order.
      dtype: the run's float dtype (floating inputs are cast to it; integer token ids stay integers).
      autocast: ``train.autocast`` (``"float16"``, ``"bfloat16"``) or ``None``.
    """
    model.eval()
    predictions = []
    with torch.no_grad(), autocast_context(None if autocast is None else getattr(torch, autocast)):
        for x in inputs:
            predictions.append(model(model_input(torch.as_tensor(x), dtype)).argmax(1).numpy())
    return np.concatenate(predictions) if predictions else np.zeros(0, np.int64)


def jax_predictions(model: Any, inputs: Iterable[Any], dtype: Any, autocast: str | None = None) -> np.ndarray:
    """JAX's predicted class per sample, through one jitted eval forward (:func:`jax_impl.train.eval_step`).

    Args:
      model: the ``flax.nnx`` model, as it is now (its mode is set inside the jitted forward, not on it).
      inputs: batches of inputs (arrays or tensors), in order.
      dtype: the run's NumPy float dtype (floating inputs are cast to it).
      autocast: ``train.autocast`` or ``None``.
    """
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl.train import TrainState

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = TrainState(params, rest, None)
    forward = _eval_step(graphdef, None if autocast is None else jnp.dtype(autocast))
    predictions = [np.asarray(forward(state, jnp.asarray(input_array(x, dtype))).argmax(1)) for x in inputs]
    return np.concatenate(predictions) if predictions else np.zeros(0, np.int64)


@functools.lru_cache(maxsize=4)
def _eval_step(graphdef: Any, autocast: Any = None) -> Any:
    """One jitted eval forward per model graph (and autocast dtype), shared by every epoch's evaluation. The
    cache is bounded: its keys hold the user's model classes, and a process may run many experiments."""
    from jax_impl.train import eval_step

    return eval_step(graphdef, autocast)
