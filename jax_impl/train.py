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

Three habits of torch recipes are options of the step:
``autocast=jnp.bfloat16`` runs the forward and the loss under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (:mod:`jax_impl.amp`),
``clip_grad_norm=max_norm`` is ``torch.nn.utils.clip_grad_norm_(model.parameters(),
max_norm)`` between ``backward()`` and ``step()``, and
:func:`accumulating_train_step` is gradient accumulation over ``k``
micro-batches (``(loss / k).backward()`` on each, one ``step()`` after them).

The step is one ``jax.jit`` over the model split into parameters and the rest
(BatchNorm running statistics, counters, RNG state), so nothing re-walks the
module graph per call; the batch is an argument (a batch closed over would be
a constant baked into the compiled step). Dropout masks with torch's numbers
are drawn on the host before each call and passed in
(:func:`jax_impl.random.host_draws.jit_with_host_draws`), so the compiled
step holds no host callback. The update is the optimizer's
exact ``tx.step``: torch's in-place ``param.add_(...)`` reproduced, where
``tx.update`` + ``optax.apply_updates`` would round ``new - old``. The model
runs in train mode (BatchNorm batch statistics and buffer updates, dropout
on); :func:`eval_step` runs it in eval mode, as ``model.eval()`` under
``torch.no_grad()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
from flax import nnx

from jax_impl import amp
from jax_impl._barrier import after_all
from jax_impl.nn.utils import clip_grad_norm_
from jax_impl.random.host_draws import jit_with_host_draws

__all__ = ["TrainState", "accumulating_train_step", "closure_train_step", "eval_step", "init_train_state",
           "loss_and_grads", "merge_model", "train_step"]


class TrainState(NamedTuple):
    """What a step carries: the model split in two, and the optimizer state.

    :func:`init_train_state` stores ``params`` and ``buffers`` as flax's pure
    dicts (``nnx.to_pure_dict``: nested dicts of arrays, e.g.
    ``state.params["conv1"]["weight"]``). ``jax.jit`` flattens plain dicts
    without calling Python, where an ``nnx.State`` of variables costs a Python
    call per variable on every step, going in and coming out, while the
    compiled step waits. A state split with
    ``nnx.split`` (``nnx.State`` of variables) works as well, and a step
    returns its state in the form it was given.
    """

    params: Any  # the nnx.Param variables' values (a pure dict, or an nnx.State)
    buffers: Any  # everything else (BatchNorm statistics, counters, RNG state), in the same form
    opt_state: Any


def init_train_state(model: nnx.Module, tx: Any) -> tuple[Any, TrainState]:
    """Splits ``model`` into ``(graphdef, TrainState)``; ``tx`` is a ``jax_impl.optim`` transformation.

    The parameters and buffers are pure dicts (see :class:`TrainState`);
    :func:`merge_model` (``nnx.merge``) rebuilds the model from them.
    """
    graphdef, params, buffers = nnx.split(model, nnx.Param, ...)
    params, buffers = nnx.to_pure_dict(params), nnx.to_pure_dict(buffers)
    return graphdef, TrainState(params, buffers, tx.init(params))


def merge_model(graphdef: Any, state: TrainState) -> nnx.Module:
    """The model back from its graph and state (e.g. to evaluate it, or to convert it to a torch state dict)."""
    return nnx.merge(graphdef, state.params, state.buffers)


def loss_and_grads(graphdef: Any, loss_fn: Callable[[Any, Any], Any], state: TrainState, x: Any,
                   y: Any, divisor: int = 1, autocast: Any = None) -> tuple[Any, Any, Any]:
    """``(loss, grads, new buffers)`` of one forward and backward pass in train mode (traceable).

    ``divisor`` ``k`` differentiates ``loss / k``, as torch's ``(loss / k).backward()``
    of a micro-batch; the returned loss is the micro-batch's own, undivided.
    ``autocast`` (a dtype) runs the forward and the loss inside :func:`jax_impl.amp.autocast`.
    The new buffers come in the form of ``state.buffers`` (a pure dict, or an ``nnx.State``).
    """

    def loss_of(params):
        # Fresh variables for the buffers: BatchNorm updates them inside this (grad) trace.
        model = nnx.merge(graphdef, params, jax.tree.map(lambda v: v, state.buffers))
        model.train()
        with _autocast(autocast):
            loss = loss_fn(model(x), y)
        scaled = loss if divisor == 1 else loss / divisor
        return scaled, (loss, nnx.state(model, nnx.Not(nnx.Param)))

    (_, (loss, buffers)), grads = jax.value_and_grad(loss_of, has_aux=True)(state.params)
    if not _holds_variables(state.buffers):  # returned in the form given (a pure dict from init_train_state)
        buffers = nnx.to_pure_dict(buffers)
    return loss, grads, buffers


def _holds_variables(tree: Any) -> bool:
    """Whether ``tree`` is an ``nnx.State`` or has ``nnx.Variable`` nodes (not a pure dict of arrays)."""
    return isinstance(tree, nnx.State) or any(
        isinstance(leaf, nnx.Variable) for leaf in jax.tree.leaves(tree, is_leaf=lambda v: isinstance(v, nnx.Variable)))


def _autocast(dtype: Any) -> Any:
    """``jax_impl.amp.autocast(dtype)``, or no autocast for ``None``."""
    return amp.autocast(dtype) if dtype is not None else amp.autocast(enabled=False)


def _optimizer_step(tx: Any, grads: Any, state: TrainState, buffers: Any, clip_grad_norm: float | None,
                    norm_type: float) -> TrainState:
    """Optional ``clip_grad_norm_``, then torch's optimizer step (``tx.step``), on the step's gradients."""
    grads = after_all(grads)  # the update after the whole backward pass, as torch's optimizer.step()
    if clip_grad_norm is not None:
        grads = clip_grad_norm_(grads, clip_grad_norm, norm_type)[1]
    params, opt_state = tx.step(grads, state.opt_state, state.params)
    return TrainState(params, buffers, opt_state)


def train_step(graphdef: Any, loss_fn: Callable[[Any, Any], Any], tx: Any, *, donate: bool = True,
               clip_grad_norm: float | None = None, norm_type: float = 2.0,
               autocast: Any = None) -> Callable[[TrainState, Any, Any], tuple[TrainState, Any]]:
    """The jitted step ``(state, x, y) -> (state, loss)``: forward, backward and torch's optimizer step.

    Args:
      graphdef: from :func:`init_train_state`.
      loss_fn: ``loss_fn(outputs, targets)``, e.g. ``jax_impl.nn.CrossEntropyLoss()``.
      tx: a ``jax_impl.optim`` transformation (its exact ``step`` is used).
      donate: let XLA reuse the input state's buffers for the output (the
        state passed in is invalid afterwards, as torch's in-place update
        leaves no old parameters). ``False`` keeps it, e.g. to compare
        the state before and after a step.
      clip_grad_norm: ``max_norm`` of ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm,
        norm_type)`` applied between backward and step (every gradient
        times ``min(max_norm / (total_norm + 1e-6), 1)``); ``None`` clips nothing.
      norm_type: the clip's ``p`` (``inf`` for the max norm).
      autocast: ``jnp.bfloat16`` runs the forward and the loss as under
        ``torch.autocast("cpu", dtype=torch.bfloat16)`` (:mod:`jax_impl.amp`;
        parameters, gradients and the update stay float32); ``None`` runs
        without autocast.

    Returns:
      The step function; its ``loss`` is the loss of the batch before the update.
    """

    def step(state: TrainState, x: Any, y: Any) -> tuple[TrainState, Any]:
        loss, grads, buffers = loss_and_grads(graphdef, loss_fn, state, x, y, autocast=autocast)
        return _optimizer_step(tx, grads, state, buffers, clip_grad_norm, norm_type), loss

    return jit_with_host_draws(step, donate_argnums=(0,) if donate else (), key_argnums=(1, 2))


def accumulating_train_step(graphdef: Any, loss_fn: Callable[[Any, Any], Any], tx: Any, accumulate: int, *,
                            donate: bool = True, clip_grad_norm: float | None = None, norm_type: float = 2.0,
                            autocast: Any = None) -> Callable[[TrainState, Any], tuple[TrainState, list[Any]]]:
    """One optimizer step over up to ``accumulate`` micro-batches, as torch's gradient-accumulation recipe::

        optimizer.zero_grad()
        for x, y in micro_batches:              # k of them
            (loss_fn(model(x), y) / k).backward()   # .grad += each micro-batch's gradient, in order
        clip_grad_norm_(model.parameters(), max_norm)   # if clip_grad_norm
        optimizer.step()

    Args:
      graphdef: from :func:`init_train_state`.
      loss_fn: ``loss_fn(outputs, targets)``.
      tx: a ``jax_impl.optim`` transformation (its exact ``step`` is used).
      accumulate: ``k``, the divisor of every micro-batch's loss. A shorter
        list of micro-batches (an epoch's trailing ones) is still divided by
        ``k``, as the recipe's ``loss / k`` does.
      donate: as :func:`train_step`.
      clip_grad_norm, norm_type: as :func:`train_step`, on the accumulated gradients.
      autocast: as :func:`train_step`.

    Returns:
      ``step(state, micro_batches) -> (state, losses)``: ``micro_batches`` a
      sequence of ``(x, y)``, ``losses`` each micro-batch's undivided loss.
      Each micro-batch runs one jitted forward and backward (the micro-batches
      may differ in shape), the update one jitted optimizer step.
    """
    if not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(f"accumulate must be a positive integer, got {accumulate!r}")

    def first(state: TrainState, x: Any, y: Any) -> tuple[Any, Any, Any]:
        loss, grads, buffers = loss_and_grads(graphdef, loss_fn, state, x, y, accumulate, autocast)
        return buffers, grads, loss

    def add(state: TrainState, acc: Any, x: Any, y: Any) -> tuple[Any, Any, Any]:
        loss, grads, buffers = loss_and_grads(graphdef, loss_fn, state, x, y, accumulate, autocast)
        # torch's AccumulateGrad: `.grad += new`, the running sum first.
        return buffers, jax.tree.map(lambda a, g: a + g, acc, grads), loss

    def update(state: TrainState, grads: Any) -> TrainState:
        return _optimizer_step(tx, grads, state, state.buffers, clip_grad_norm, norm_type)

    first_jit = jit_with_host_draws(first, key_argnums=(1, 2))
    add_jit = jit_with_host_draws(add, donate_argnums=(1,), key_argnums=(2, 3))
    update_jit = jax.jit(update, donate_argnums=(0,) if donate else ())

    def step(state: TrainState, micro_batches: Any) -> tuple[TrainState, list[Any]]:
        batches = list(micro_batches)
        if not 1 <= len(batches) <= accumulate:
            raise ValueError(f"expected 1 to {accumulate} micro-batches, got {len(batches)}")
        buffers, grads, loss = first_jit(state, *batches[0])
        losses = [loss]
        for x, y in batches[1:]:
            buffers, grads, loss = add_jit(state._replace(buffers=buffers), grads, x, y)
            losses.append(loss)
        return update_jit(state._replace(buffers=buffers), grads), losses

    return step


def closure_train_step(graphdef: Any, loss_fn: Callable[[Any, Any], Any], tx: Any, *,
                       order: Sequence[int] | None = None,
                       autocast: Any = None) -> Callable[[TrainState, Any, Any], tuple[TrainState, Any]]:
    """The step of an optimizer with torch's closure protocol (``jax_impl.optim.lbfgs``), as torch's ::

        def closure():
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss
        loss = optimizer.step(closure)

    ``tx.step(closure, opt_state, params)`` runs on the host and calls the
    closure as often as torch does; each call is one jitted forward and
    backward in train mode on the same batch, so BatchNorm's running
    statistics update and dropout draws masks per evaluation, as in torch.

    Args:
      graphdef: from :func:`init_train_state`.
      loss_fn: ``loss_fn(outputs, targets)``.
      tx: an optimizer with ``init(params)`` and ``step(closure, state, params) -> (loss, params, state)``.
      order: the parameters' order in the optimizer's flat vector, as indices into the leaves of
        ``state.params`` (torch's ``model.parameters()`` order; default: the leaves' own order).
      autocast: as :func:`train_step`.

    Returns:
      ``step(state, x, y) -> (state, loss)``, ``loss`` the first evaluation's (torch's
      ``optimizer.step(closure)`` return value). The state's ``opt_state`` is ``tx``'s host state.
    """
    grad_fn = jit_with_host_draws(
        lambda state, x, y: loss_and_grads(graphdef, loss_fn, state, x, y, autocast=autocast), key_argnums=(1, 2))

    def step(state: TrainState, x: Any, y: Any) -> tuple[TrainState, Any]:
        leaves, treedef = jax.tree.flatten(state.params)
        index = list(range(len(leaves))) if order is None else list(order)
        if sorted(index) != list(range(len(leaves))):
            raise ValueError(f"order must be a permutation of the {len(leaves)} parameter leaves, got {index}")
        buffers = state.buffers

        def tree_of(ordered: Sequence[Any]) -> Any:
            flat = [None] * len(ordered)
            for position, leaf in zip(index, ordered, strict=True):
                flat[position] = leaf
            return jax.tree.unflatten(treedef, flat)

        def closure(ordered: Sequence[Any]) -> tuple[Any, list[Any]]:
            nonlocal buffers  # each evaluation's forward updates them, as torch's closure's does
            loss, grads, buffers = grad_fn(TrainState(tree_of(ordered), buffers, None), x, y)
            grad_leaves = treedef.flatten_up_to(grads)
            return loss, [grad_leaves[i] for i in index]

        loss, ordered, opt_state = tx.step(closure, state.opt_state, [leaves[i] for i in index])
        params = tree_of([jax.numpy.asarray(leaf) for leaf in ordered])
        return TrainState(params, buffers, opt_state), loss

    return step


def eval_step(graphdef: Any, autocast: Any = None) -> Callable[[TrainState, Any], Any]:
    """The jitted forward ``(state, x) -> outputs`` in eval mode (BatchNorm running statistics, no dropout);
    ``autocast`` as :func:`train_step`'s."""

    def forward(state: TrainState, x: Any) -> Any:
        model = merge_model(graphdef, state)
        model.eval()
        with _autocast(autocast):
            return model(x)

    return jax.jit(forward)
