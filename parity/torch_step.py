"""torch's side of one optimizer step of a run: the recipe's loop body, with gradient clipping and accumulation.

The runner's torch side, the float64 floor twin (:mod:`parity.floor`) and
``torch_precision_floor`` all step through :func:`torch_train_step`, so the
three follow one recipe::

    optimizer.zero_grad()
    for x, y in micro_batches:                       # train.accumulate = k of them
        with torch.autocast("cpu", dtype=torch.bfloat16):   # train.autocast: bfloat16 (else no autocast)
            loss = loss_fn(model(x), y)
        (loss / k).backward()                        # plain loss.backward() when k == 1
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)   # train.clip_grad_norm
    optimizer.step()

An optimizer that steps with a closure (``torch.optim.LBFGS``) evaluates the
batch's loss and gradients as often as it needs (one micro-batch, no
accumulation or clipping: the config refuses them)::

    def closure():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):   # train.autocast
            loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    loss = optimizer.step(closure)                   # the first evaluation's loss
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import contextlib

import torch

__all__ = ["autocast_context", "micro_batch_groups", "model_input", "step_loss", "torch_train_step"]

T = TypeVar("T")


def model_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A batch's inputs in the run's ``dtype`` (``train.dtype``); integer inputs (token ids for an
    ``Embedding``) stay integers."""
    return x.to(dtype) if x.is_floating_point() else x


def autocast_context(dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast("cpu", dtype=dtype)``; no autocast for ``None``."""
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def micro_batch_groups(batches: Iterable[T], accumulate: int) -> Iterator[list[T]]:
    """Consecutive groups of ``accumulate`` batches, one group per optimizer step; the last may be shorter
    (an epoch's trailing micro-batches make one more step)."""
    group: list[T] = []
    for batch in batches:
        group.append(batch)
        if len(group) == accumulate:
            yield group
            group = []
    if group:
        yield group


def step_loss(losses: Sequence[float]) -> float:
    """The loss recorded for an optimizer step: the mean of its micro-batches' (undivided) losses, the
    batch's loss itself without accumulation."""
    return sum(losses) / len(losses)


def torch_train_step(model: torch.nn.Module, loss_fn: Any, optimizer: torch.optim.Optimizer,
                     micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, dtype: torch.dtype,
                     accumulate: int = 1, clip_grad_norm: float | None = None,
                     norm_type: float = 2.0, autocast: torch.dtype | None = None) -> list[float]:
    """One optimizer step of ``model`` over ``micro_batches`` (inputs cast to ``dtype``); returns each
    micro-batch's undivided loss.

    Each loss is divided by ``accumulate`` before its ``backward()`` also when
    fewer micro-batches are given (an epoch's trailing group), as the recipe's
    ``loss / k`` is. A ``DistributedDataParallel`` model runs all but the last
    micro-batch under ``model.no_sync()``, so each rank sums its gradients
    locally and the last backward all-reduces the sums once. ``autocast`` (``torch.bfloat16``) runs each forward and
    loss under ``torch.autocast("cpu", dtype=autocast)``; the backward and the
    step run outside it, as torch's AMP recipe has them.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        return [_closure_step(model, loss_fn, optimizer, micro_batches, dtype, autocast)]
    optimizer.zero_grad()
    losses = []
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    for i, (x, y) in enumerate(micro_batches):
        # DDP: the first micro-batches accumulate each rank's gradients locally (no_sync), the last one's
        # backward all-reduces the sums, as a DDP recipe with gradient accumulation writes it.
        with model.no_sync() if ddp and i < len(micro_batches) - 1 else contextlib.nullcontext():
            with autocast_context(autocast):
                loss = loss_fn(model(model_input(x, dtype)), y)
            (loss if accumulate == 1 else loss / accumulate).backward()
        losses.append(float(loss.item()))
    if clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm, norm_type)
    optimizer.step()
    return losses


def _closure_step(model: torch.nn.Module, loss_fn: Any, optimizer: torch.optim.Optimizer,
                  micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype,
                  autocast: torch.dtype | None) -> float:
    """``optimizer.step(closure)`` on one batch; the loss of the closure's first evaluation."""
    if len(micro_batches) != 1:
        raise ValueError(f"{type(optimizer).__name__} steps on one batch with a closure, got {len(micro_batches)} "
                         "micro-batches (train.accumulate must be 1)")
    (x, y), = micro_batches
    x = model_input(x, dtype)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        with autocast_context(autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    return float(optimizer.step(closure).item())
