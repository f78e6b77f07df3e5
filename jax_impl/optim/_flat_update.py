"""Elementwise optimizer updates of conv kernels on XLA:CPU, computed on 2-D views.

XLA:CPU compiles an elementwise loop over an array as the array's own loop
nest, its last dimension innermost. For a ``(O, I, 3, 3)`` conv weight that
is a loop of three iterations, which LLVM leaves scalar: an update that takes
a square root (Adam's family, RMSprop, Adagrad, Adadelta) then runs its
roots and divisions one element at a time, 2-3x slower than on the same
values viewed ``(O, I*3*3)``. A reshape inside the step does not survive
(XLA moves it back out of the loop), so the views pass through jax_impl's
barrier (a custom call that does nothing and copies nothing): the update's
loops stay 2-D and vectorised, and XLA copies each result back into its
place, which costs less than the scalar square roots. The operations and
their order are the 4-D update's: the results are bit for bit the same.

Only for updates that are elementwise (each result element depends on the
same element of each input and on scalars) and whose per-parameter states
have the parameter's shape; an update with no square root stays 4-D (its
loops are cheap, and the copies would cost more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

from jax_impl._barrier import barrier

__all__ = ["Rows", "applies", "on_rows", "restore"]

# A last dimension that is a multiple of this vectorises as it is (4x4 kernels, 1x1 ones collapse).
_VECTOR_MULTIPLE = 4


class Rows(NamedTuple):
    """One parameter's update outputs computed on ``(shape[0], -1)`` views (``None`` kept), and its shape."""

    outputs: tuple[Any, ...]
    shape: tuple[int, ...]


def applies(param: jax.Array, states: Sequence[Any]) -> bool:
    """Whether ``param``'s update runs as scalar loops on XLA:CPU and can run on 2-D views: the CPU backend, at
    least three dimensions, a last one above 1 that is not a multiple of 4, not empty, and every
    per-parameter state either absent or of the parameter's shape."""
    shape = param.shape
    return (jax.default_backend() == "cpu" and len(shape) > 2 and shape[-1] > 1
            and shape[-1] % _VECTOR_MULTIPLE != 0 and param.size > 0
            and all(s is None or getattr(s, "shape", None) == shape for s in states))


def on_rows(update: Callable[..., Sequence[Any]], shape: tuple[int, ...], args: Sequence[Any]) -> Rows:
    """``update(*args)`` on ``(shape[0], -1)`` views of ``args`` (each of ``shape``, or ``None``)."""
    rows = [None if a is None else a.reshape(shape[0], -1) for a in args]
    return Rows(tuple(update(*rows)), tuple(shape))


def restore(flat: list[Any]) -> list[Any]:
    """``flat`` (per-parameter output tuples, some :class:`Rows`) with every :class:`Rows` back in its
    parameter's shape, all of them through one barrier (which keeps their loops 2-D)."""
    arrays = [o for item in flat if isinstance(item, Rows) for o in item.outputs if o is not None]
    if not arrays:
        return flat
    kept = iter(barrier(arrays))
    out = []
    for item in flat:
        if isinstance(item, Rows):
            item = tuple(None if o is None else next(kept).reshape(item.shape) for o in item.outputs)
        out.append(item)
    return out
