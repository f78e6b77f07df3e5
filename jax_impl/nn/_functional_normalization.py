"""torch.nn.functional's ``layer_norm``, ``group_norm``, ``rms_norm`` and ``normalize``.

Each normalises with the biased variance and ``1 / sqrt(var + eps)``, as
torch's CPU kernels (``aten/src/ATen/native/layer_norm.cpp``,
``group_norm.cpp``, ``cpu/layer_norm_kernel.cpp``) do; the reductions sum in
another order than torch's, so results agree to rounding (about 1e-16
relative in float64, 1e-7 in float32), not bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp

from jax_impl.tensor_ops import torch_vector_norm

__all__ = ["group_norm", "layer_norm", "normalize", "rms_norm"]


def _normalized_axes(x, normalized_shape, fn: str) -> tuple[int, ...]:
    """The trailing axes ``normalized_shape`` names, checked as aten's ``_check_layer_norm_inputs``."""
    shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    if len(shape) < 1:
        raise RuntimeError(f"Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
                           f"one element, but got normalized_shape = {list(shape)}")
    if x.ndim < len(shape) or tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, {', '.join(map(str, shape))}], "
            f"but got input of size{list(x.shape)}"
        )
    return tuple(range(x.ndim - len(shape), x.ndim))


def _check_affine(name: str, param, shape: Sequence[int]) -> None:
    if param is not None and tuple(param.shape) != tuple(shape):
        raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                           f"{list(param.shape)} and normalized_shape = {list(shape)}")


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.layer_norm``: ``(x - E[x]) / sqrt(Var[x] + eps) * weight + bias``.

    Args:
      input: array ``(*, *normalized_shape)``.
      normalized_shape: the trailing shape normalised over (an int for one axis).
      weight: optional scale of shape ``normalized_shape``.
      bias: optional shift of shape ``normalized_shape``.
      eps: added to the biased variance.
    """
    x = jnp.asarray(input)
    axes = _normalized_axes(x, normalized_shape, "layer_norm")
    shape = x.shape[axes[0]:]
    _check_affine("weight", weight, shape)
    _check_affine("bias", bias, shape)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    centred = x - mean
    var = jnp.mean(centred * centred, axis=axes, keepdims=True)
    y = centred * (1 / jnp.sqrt(var + jnp.asarray(eps, x.dtype)))
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.group_norm``: layer norm over each group of ``C // num_groups`` channels.

    Args:
      input: array ``(N, C, *)``.
      num_groups: number of groups; must divide ``C``.
      weight: optional per-channel scale ``(C,)``.
      bias: optional per-channel shift ``(C,)``.
      eps: added to the biased variance.
    """
    x = jnp.asarray(input)
    if x.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {x.ndim}")
    n, c = x.shape[:2]
    if c % num_groups != 0:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got input of shape "
            f"{list(x.shape)} and num_groups={num_groups}"
        )
    if (n * c // num_groups) * math.prod(x.shape[2:]) == 1:
        # torch.nn.functional._verify_batch_size on [N * C / G, G, *S].
        size = [n * c // num_groups, num_groups, *x.shape[2:]]
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and (param.ndim != 1 or param.shape[0] != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(param.shape)} and input of shape {list(x.shape)}")
    grouped = x.reshape(n, num_groups, -1)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    centred = grouped - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    y = (centred * (1 / jnp.sqrt(var + jnp.asarray(eps, x.dtype)))).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * jnp.reshape(weight, per_channel)
    if bias is not None:
        y = y + jnp.reshape(bias, per_channel)
    return y


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """``torch.nn.functional.rms_norm``: ``x / sqrt(mean(x**2) + eps) * weight``.

    Args:
      input: array ``(*, *normalized_shape)``.
      normalized_shape: the trailing shape normalised over (an int for one axis).
      weight: optional scale of shape ``normalized_shape``.
      eps: added to the mean square; ``None`` is ``finfo(input.dtype).eps``, as torch.
    """
    x = jnp.asarray(input)
    axes = _normalized_axes(x, normalized_shape, "rms_norm")
    _check_affine("weight", weight, x.shape[axes[0]:])
    # aten rms_norm_composite: half types are upcast to float32 and the result cast back.
    work = jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype
    xu = x.astype(work)
    eps = float(jnp.finfo(x.dtype).eps) if eps is None else eps
    y = (xu * (1 / jnp.sqrt(jnp.mean(xu * xu, axis=axes, keepdims=True) + jnp.asarray(eps, work)))).astype(x.dtype)
    return y if weight is None else y * weight


def normalize(input, p: float = 2.0, dim: int | Sequence[int] = 1, eps: float = 1e-12):
    """``torch.nn.functional.normalize``: ``input / max(||input||_p, eps)`` along ``dim``.

    torch's composition, ``input / input.norm(p, dim, keepdim=True).clamp_min(eps)``: the norm's gradient is
    torch's ``norm_backward`` (zero for a zero vector, :func:`jax_impl.tensor_ops.torch_vector_norm`), and
    ``clamp_min``'s passes where the norm is at least ``eps`` (none flows through the clamp below it).
    """
    input = jnp.asarray(input)
    if not jnp.issubdtype(input.dtype, jnp.floating) and not jnp.issubdtype(input.dtype, jnp.complexfloating):
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. "
                           f"Got {str(input.dtype).capitalize()}")
    ndim = max(input.ndim, 1)
    for d in (dim,) if isinstance(dim, int) else tuple(dim):
        if not -ndim <= d < ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {d})")
    norm = torch_vector_norm(input, p, dim, keepdim=True)
    return input / jnp.where(norm >= eps, norm, jnp.asarray(eps, norm.dtype))
