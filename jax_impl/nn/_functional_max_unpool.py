"""``torch.nn.functional.max_unpool1d/2d/3d``: the partial inverse of max pooling.

torch (``aten/src/ATen/native/cpu/MaxUnpoolKernel.cpp``) writes each input value at its index in a zero
output, per channel: ``out.view(N, C, -1)[n, c, indices[n, c, i]] = input[n, c, i]``; the output's spatial
size defaults to ``(in - 1) * stride - 2 * padding + kernel_size`` per dimension, and an ``output_size``
must lie strictly within ``stride`` of that (``F._unpool_output_size``). The gradient is torch's
``max_pool_double_backward``: ``grad_input[n, c, i] = grad_out.view(N, C, -1)[n, c, indices[n, c, i]]``
(each entry of a repeated index gets the gradient, though one of them is written).

Indices from ``max_pool*d(..., return_indices=True)`` repeat only where their values are equal (overlapping
windows), so the output is determined. Where repeated indices carry different values, torch's CPU kernel
writes them from several threads and which one stays varies from call to call (torch documents the op as
nondeterministic); here it is one of them. An index outside the output raises torch's ``RuntimeError``
when the indices are concrete (outside ``jax.jit``); a traced one cannot be checked and is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["max_unpool1d", "max_unpool2d", "max_unpool3d"]


def _ntuple(value, n: int) -> tuple:
    # torch's _single/_pair/_triple: an iterable passes through, a scalar repeats.
    return tuple(value) if isinstance(value, Iterable) else (value,) * n


def _unpool_output_size(spatial: Sequence[int], kernel_size, stride, padding, output_size) -> tuple[int, ...]:
    """``torch.nn.functional._unpool_output_size``."""
    nd = len(kernel_size)
    default = [(spatial[d] - 1) * stride[d] + kernel_size[d] - 2 * padding[d] for d in range(nd)]
    if output_size is None:
        return tuple(default)
    output_size = list(output_size)
    if len(output_size) == nd + 2:
        output_size = output_size[2:]
    if len(output_size) != nd:
        raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has a "
                         f"length of '{len(output_size)}'")
    for d in range(nd):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < output_size[d] < high:
            raise ValueError(f'invalid output_size "{tuple(output_size)}" (dim {d} must be between {low} and '
                             f"{high})")
    return tuple(int(s) for s in output_size)


def _torch_shape(shape) -> str:
    return f"[{', '.join(map(str, shape))}]"


def _check(input: jax.Array, indices: jax.Array, nd: int) -> None:
    name = f"max_unpooling{max(nd, 2)}d"
    ranks = (nd + 1, nd + 2) if nd > 1 else (2, 3)
    if input.ndim not in ranks:
        if nd == 1:
            raise RuntimeError(f"Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with "
                               f"{input.ndim + 1} dimensions.")
        raise RuntimeError(f"Input to {name} should be a {ranks[0]}d or {ranks[1]}d Tensor, but got a tensor with "
                           f"{input.ndim} dimensions.")
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise RuntimeError(f"elements in indices should be type int64 but got: {indices.dtype}")
    if input.shape != indices.shape:
        unit = (1,) if nd == 1 else ()  # torch's 1-d op is the 2-d one on a trailing dimension of 1
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({_torch_shape(input.shape + unit)}) but got indices tensor with shape: "
                           f"{_torch_shape(indices.shape + unit)}")
    for i in range(1, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but "
                               f"got {_torch_shape(input.shape)} with dimension {i} being empty.")


def _check_range(indices: jax.Array, out_spatial: tuple[int, ...]) -> None:
    if isinstance(indices, jax.core.Tracer):
        return
    flat = np.asarray(indices).reshape(-1)
    size = int(np.prod(out_spatial))
    bad = flat[(flat < 0) | (flat >= size)]
    if bad.size:
        sizes = "x".join(map(str, out_spatial if len(out_spatial) > 1 else (*out_spatial, 1)))
        raise RuntimeError(f"Found an invalid max index: {bad[0]} (output volumes are of size {sizes})")


def _unpool_values(values: jax.Array, indices: jax.Array, size: int) -> jax.Array:
    """``(rows, L)`` values written at their ``indices`` into ``(rows, size)`` zeros."""
    rows = jnp.arange(values.shape[0])[:, None]
    return jnp.zeros((values.shape[0], size), values.dtype).at[rows, indices].set(values, mode="drop")


_unpool = jax.custom_vjp(_unpool_values, nondiff_argnums=(2,))


def _unpool_fwd(values, indices, size):
    return _unpool_values(values, indices, size), indices


def _unpool_bwd(size, indices, grad):
    # torch's max_pool_double_backward: a gather, so every repeated index receives the gradient; a value
    # dropped for an index outside the output (traced indices, unchecked) gets none
    valid = (indices >= 0) & (indices < size)
    gathered = jnp.take_along_axis(grad, jnp.clip(indices, 0, size - 1), axis=1)
    return jnp.where(valid, gathered, jnp.zeros((), grad.dtype)), None


_unpool.defvjp(_unpool_fwd, _unpool_bwd)


def _max_unpool(nd: int, input, indices, kernel_size, stride, padding, output_size) -> jax.Array:
    input, indices = jnp.asarray(input), jnp.asarray(indices)
    kernel_size = _ntuple(kernel_size, nd)
    stride = kernel_size if stride is None else _ntuple(stride, nd)
    padding = _ntuple(padding, nd)
    _check(input, indices, nd)
    out_spatial = _unpool_output_size(input.shape[-nd:], kernel_size, stride, padding, output_size)
    for d, size in enumerate(out_spatial):
        if size < 0:
            raise ValueError(f"max_unpooling: output_size must contain non-negative spatial dimensions, but got "
                             f"output_size[{d}]={size}")
    lead = input.shape[:-nd]
    if input.size == 0:  # an empty batch: torch's empty output
        return jnp.zeros((*lead, *out_spatial), input.dtype)
    _check_range(indices, out_spatial)
    rows = int(np.prod(lead))
    size = int(np.prod(out_spatial))
    out = _unpool(input.reshape(rows, -1), indices.reshape(rows, -1), size)
    return out.reshape(*lead, *out_spatial)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> jax.Array:
    """``torch.nn.functional.max_unpool1d``: ``input`` written at ``indices`` into zeros of length
    ``(L - 1) * stride - 2 * padding + kernel_size`` (or ``output_size``)."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> jax.Array:
    """``torch.nn.functional.max_unpool2d``: ``input`` written at its flat ``H_out * W_out`` ``indices`` into
    zeros of each channel's output size."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> jax.Array:
    """``torch.nn.functional.max_unpool3d``: ``input`` written at its flat ``D_out * H_out * W_out``
    ``indices`` into zeros of each channel's output size."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)
