"""A train step and an eval step for any ``jax_impl`` model, loss and optimizer, with torch's semantics.

torch's loop ::

    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()

becomes ::

    graphdef, state = init_train_state(model, tx)
    step = train_step(graphdef, loss_fn, tx)
    for x, y in loader:
        state, loss = step(state, x, y)
    model = merge_model(graphdef, state)

The step is one ``jax.jit`` over the model split into parameters and the rest
(BatchNorm running statistics, counters, RNG state), so nothing re-walks the
module graph per call; the batch is an argument (a batch closed over would be
a constant baked into the compiled step). The update is the optimizer's
exact ``tx.step``: torch's in-place ``param.add_(...)`` reproduced, where
``tx.update`` + ``optax.apply_updates`` would round ``new - old``. The model
runs in train mode (BatchNorm batch statistics and buffer updates, dropout
on); :func:`eval_step` runs it in eval mode, as ``model.eval()`` under
``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from flax import nnx

__all__ = ["TrainState", "eval_step", "init_train_state", "loss_and_grads", "merge_model", "train_step"]


class TrainState(NamedTuple):
    """What a step carries: the model split in two, and the optimizer state."""

    params: Any  # nnx.State of nnx.Param
    buffers: Any  # nnx.State of everything else (BatchNorm statistics, counters, RNG state)
    opt_state: Any


def init_train_state(model: nnx.Module, tx: Any) -> tuple[Any, TrainState]:
    """Splits ``model`` into ``(graphdef, TrainState)``; ``tx`` is a ``jax_impl.optim`` transformation."""
    graphdef, params, buffers = nnx.split(model, nnx.Param, ...)
    return graphdef, TrainState(params, buffers, tx.init(params))


def merge_model(graphdef: Any, state: TrainState) -> nnx.Module:
    """The model back from its graph and state (e.g. to evaluate it, or to convert it to a torch state dict)."""
    return nnx.merge(graphdef, state.params, state.buffers)


def loss_and_grads(graphdef: Any, loss_fn: Callable[[Any, Any], Any], state: TrainState, x: Any,
                   y: Any) -> tuple[Any, Any, Any]:
    """``(loss, grads, new buffers)`` of one forward and backward pass in train mode (traceable)."""

    def loss_of(params):
        # Fresh variables for the buffers: BatchNorm updates them inside this (grad) trace.
        model = nnx.merge(graphdef, params, jax.tree.map(lambda v: v, state.buffers))
        model.train()
        loss = loss_fn(model(x), y)
        return loss, nnx.state(model, nnx.Not(nnx.Param))

    (loss, buffers), grads = jax.value_and_grad(loss_of, has_aux=True)(state.params)
    return loss, grads, buffers


def train_step(graphdef: Any, loss_fn: Callable[[Any, Any], Any], tx: Any, *,
               donate: bool = True) -> Callable[[TrainState, Any, Any], tuple[TrainState, Any]]:
    """The jitted step ``(state, x, y) -> (state, loss)``: forward, backward and torch's optimizer step.

    Args:
      graphdef: from :func:`init_train_state`.
      loss_fn: ``loss_fn(outputs, targets)``, e.g. ``jax_impl.nn.CrossEntropyLoss()``.
      tx: a ``jax_impl.optim`` transformation (its exact ``step`` is used).
      donate: let XLA reuse the input state's buffers for the output (the
        state passed in is invalid afterwards, as torch's in-place update
        leaves no old parameters). ``False`` keeps it, e.g. to compare
        the state before and after a step.

    Returns:
      The step function; its ``loss`` is the loss of the batch before the update.
    """

    def step(state: TrainState, x: Any, y: Any) -> tuple[TrainState, Any]:
        loss, grads, buffers = loss_and_grads(graphdef, loss_fn, state, x, y)
        params, opt_state = tx.step(grads, state.opt_state, state.params)
        return TrainState(params, buffers, opt_state), loss

    return jax.jit(step, donate_argnums=(0,) if donate else ())


def eval_step(graphdef: Any) -> Callable[[TrainState, Any], Any]:
    """The jitted forward ``(state, x) -> outputs`` in eval mode (BatchNorm running statistics, no dropout)."""

    def forward(state: TrainState, x: Any) -> Any:
        model = merge_model(graphdef, state)
        model.eval()
        return model(x)

    return jax.jit(forward)
