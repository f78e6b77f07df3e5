"""torch tensor operations that have no one-call ``jax.numpy`` spelling, with torch's semantics.

A generated twin carries the source of the helpers it uses (so the written
file needs only ``jax`` and ``jax_impl``): each function here uses ``jnp``
and builtins only, and no other helper. Names start with ``torch_`` so no fx
node name (the twin's local variables) can shadow them.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["HELPERS", "torch_chunk", "torch_expand", "torch_flatten", "torch_reshape", "torch_split", "torch_squeeze"]


def torch_flatten(input, start_dim=0, end_dim=-1):
    """``torch.flatten(input, start_dim, end_dim)``: dims ``start_dim..end_dim`` merged; a 0-d input gives ``(1,)``."""
    if input.ndim == 0:
        return jnp.reshape(input, (1,))
    start, end = start_dim % input.ndim, end_dim % input.ndim
    merged = 1
    for size in input.shape[start:end + 1]:
        merged *= size
    return jnp.reshape(input, input.shape[:start] + (merged,) + input.shape[end + 1:])


def torch_reshape(input, *shape):
    """``x.view(*shape)`` / ``x.reshape(*shape)``: sizes as arguments or one sequence, ``-1`` inferred."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = tuple(shape[0])
    return jnp.reshape(input, shape)


def torch_expand(input, *sizes):
    """``x.expand(*sizes)``: a broadcast view; ``-1`` keeps the size, extra sizes are new leading dims."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    lead = len(sizes) - input.ndim
    return jnp.broadcast_to(input, tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)))


def torch_split(input, split_size_or_sections, dim=0):
    """``torch.split``: pieces of ``split_size`` along ``dim`` (the last one smaller), or the given section sizes."""
    size = input.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sections = [min(step, size - start) for start in range(0, size, step)] or [0]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise ValueError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                             f"(input tensor's size at dimension {dim}), but got split_sizes={sections}")
    offsets, total = [], 0
    for length in sections[:-1]:
        total += length
        offsets.append(total)
    return tuple(jnp.split(input, offsets, axis=dim))


def torch_chunk(input, chunks, dim=0):
    """``torch.chunk``: pieces of ``ceil(size / chunks)`` along ``dim``, so fewer than ``chunks`` may come back."""
    size = input.shape[dim]
    step = max(-(-size // chunks), 1)
    sections = [min(step, size - start) for start in range(0, size, step)] or [0]
    offsets, total = [], 0
    for length in sections[:-1]:
        total += length
        offsets.append(total)
    return tuple(jnp.split(input, offsets, axis=dim))


def torch_squeeze(input, dim=None):
    """``torch.squeeze``: without ``dim`` every size-1 dim goes; with ``dim`` (int or tuple) only those of size 1."""
    if dim is None:
        return jnp.squeeze(input)
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    return jnp.squeeze(input, tuple(d % input.ndim for d in dims if input.shape[d] == 1))


HELPERS = {fn.__name__: fn for fn in (torch_chunk, torch_expand, torch_flatten, torch_reshape, torch_split,
                                      torch_squeeze)}
