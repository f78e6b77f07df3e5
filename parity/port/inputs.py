"""A port's example input as jax values: which arguments a jitted check traces and which it holds constant."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

__all__ = ["ExampleArguments", "example_arguments"]


class ExampleArguments:
    """``forward``'s positional arguments split for ``jax.jit``.

    Floating-point tensors (nested in tuples too) are the jitted function's
    arguments. Everything else is a constant of the compiled function: Python
    values the twin has baked in (``None``, a flag, a number), and integer and
    bool tensors (token ids, masks, lengths). A packed sequence's ``lengths``
    fix its shapes, so they must be host values where the twin calls
    ``pack_padded_sequence``; token ids and masks compute the same either way.

    Attributes:
      arrays: every argument, tensors as jax arrays.
      traced: the floating-point arguments, in order.
    """

    def __init__(self, example_input: Any) -> None:
        args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
        self.arrays = jax.tree.map(lambda t: jnp.asarray(t.detach().cpu().numpy()) if torch.is_tensor(t) else t,
                                   args, is_leaf=torch.is_tensor)
        self._constant = {i: a for i, a in enumerate(self.arrays) if not _has_float_array(a)}
        self.traced = tuple(a for i, a in enumerate(self.arrays) if i not in self._constant)

    def call(self, model: Any, traced: tuple) -> Any:
        """``model(*arguments)`` with ``traced`` in the floating-point arguments' places."""
        rest = iter(traced)
        return model(*[self._constant[i] if i in self._constant else next(rest) for i in range(len(self.arrays))])


def _has_float_array(value: Any) -> bool:
    return any(isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, np.inexact) for v in jax.tree.leaves(value))


def example_arguments(example_input: Any) -> ExampleArguments:
    """The :class:`ExampleArguments` of ``example_input`` (a tensor or a tuple of ``forward``'s arguments)."""
    return ExampleArguments(example_input)
