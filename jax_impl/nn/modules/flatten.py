"""``torch.nn.Flatten`` and ``torch.nn.Unflatten``."""

from __future__ import annotations

import math

import jax.numpy as jnp

from jax_impl.nn.modules.module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """``torch.nn.Flatten(start_dim=1, end_dim=-1)``: ``Tensor.flatten(start_dim, end_dim)``."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim = start_dim
        self.end_dim = end_dim

    def __call__(self, input):
        x = jnp.asarray(input)
        if x.ndim == 0:
            return x.reshape(1)
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        for d in (self.start_dim, self.end_dim):
            if not -x.ndim <= d < x.ndim:
                raise IndexError(
                    f"Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], but got {d})"
                )
        if start > end:
            raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
        return x.reshape(x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


class Unflatten(Module):
    """``torch.nn.Unflatten(dim, unflattened_size)``: split ``dim`` into ``unflattened_size`` (``-1`` allowed once)."""

    def __init__(self, dim: int, unflattened_size) -> None:
        if isinstance(dim, str):
            raise NotImplementedError("Unflatten with a named dimension (torch's named tensors)")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def __call__(self, input):
        x = jnp.asarray(input)
        d = self.dim % x.ndim
        sizes = list(self.unflattened_size)
        if sizes.count(-1) > 1:
            raise ValueError("only one dimension can be inferred")
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            sizes[sizes.index(-1)] = x.shape[d] // known if known else 0
        if math.prod(sizes) != x.shape[d]:
            raise ValueError(
                f"unflatten: Provided sizes {list(self.unflattened_size)} don't multiply up to the size of dim "
                f"{self.dim} ({x.shape[d]}) in the input tensor"
            )
        return x.reshape(x.shape[:d] + tuple(sizes) + x.shape[d + 1:])
