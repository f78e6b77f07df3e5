"""``torch.nn.functional.linear_cross_entropy``: torch 2.13's reference path, ``cross_entropy(linear(x, W, b))``.

torch runs exactly this composite when ``options`` is ``None`` (the default),
so the numbers are those of :func:`jax_impl.nn.functional.linear` (torch's
``addmm``) followed by :func:`jax_impl.nn.functional.cross_entropy`. A
``(C, d_1, ..., d_K, in_features)`` weight is flattened to
``(C * d_1 * ... * d_K, in_features)`` for the projection and the logits
reshaped to ``(N, C, d_1, ..., d_K)``. torch's chunked path (an
``options`` object: batch-chunked logits with precomputed gradients) is not
reproduced.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp

# The package module, not its names: jax_impl.nn.functional re-exports this module's function.
from jax_impl.nn import functional as _nn_functional

__all__ = ["linear_cross_entropy"]

Array = jax.Array


def _chunked_path_taken(options, out_features, reduction, label_smoothing, target, bias) -> bool:
    """Whether torch would run its chunked op for these arguments (else it warns and falls back)."""
    if options is None:
        return False
    taken = (
        reduction in {"mean", "sum", "none"}
        and label_smoothing == 0.0
        and jnp.issubdtype(target.dtype, jnp.integer)
        and not out_features
    )
    if not taken:
        warnings.warn(
            "linear_cross_entropy: ``options`` ignored; chunked path needs "
            "reduction in {'mean','sum','none'}, label_smoothing == 0, target.dtype"
            " == int64, out_features == (). Got "
            f"reduction={reduction!r}, label_smoothing={label_smoothing}, "
            f"target.dtype={_torch_dtype(target.dtype)}, out_features={tuple(out_features)}"
            f", tracing=False, linear_bias.shape={None if bias is None else tuple(bias.shape)}.",
            stacklevel=3,
        )
    return taken


def _torch_dtype(dtype) -> str:
    return f"torch.{jnp.dtype(dtype).name}"


def linear_cross_entropy(
    input: Array,
    linear_weight: Array,
    target: Array,
    *,
    linear_bias: Array | None = None,
    weight: Array | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options=None,
) -> Array:
    """Cross entropy of linearly projected inputs: ``cross_entropy(input @ W.T + b, target)``.

    With ``W`` of shape ``(C, d_1, ..., d_K, in_features)``, ``logits =
    (input @ W.reshape(-1, in_features).T + b.reshape(-1)).reshape(N, C, d_1, ..., d_K)``
    and the loss is :func:`jax_impl.nn.functional.cross_entropy` of those
    logits with ``weight``, ``reduction``, ``ignore_index`` (``None`` means
    -100 for class-index targets and is required for probability targets) and
    ``label_smoothing``.

    Args:
        input: ``(in_features,)`` or ``(N, in_features)``.
        linear_weight: ``(C, in_features)`` or ``(C, d_1, ..., d_K, in_features)`` (K-dim needs batched input).
        target: class indices ``()``, ``(N,)``, ``(N, d_1, ..., d_K)``, or probabilities of the logits' shape.
        linear_bias: optional ``(C, d_1, ..., d_K)`` bias.
        weight: optional per-class weight ``(C,)``.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        ignore_index: ignored class index, or ``None``.
        label_smoothing: in ``[0, 1]``.
        options: must be ``None`` or select torch's reference fallback; torch's chunked path raises
            ``NotImplementedError``.

    Returns:
        The loss, per element for ``'none'``, else a scalar.
    """
    x = jnp.asarray(input)
    w = jnp.asarray(linear_weight)
    target = jnp.asarray(target)
    if x.ndim < 1 or x.ndim > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {x.ndim}")
    if w.ndim < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got {w.ndim}")
    num_batches = x.shape[:-1]
    in_features = x.shape[-1]
    if in_features != w.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), "
            f"got {x.shape[-1]} and {w.shape[-1]}, respectively"
        )
    num_classes = w.shape[0]
    out_features = w.shape[1:-1]
    bias = None if linear_bias is None else jnp.asarray(linear_bias)
    if bias is not None and tuple(bias.shape) != (num_classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(num_classes, *out_features)}, got {tuple(bias.shape)}")
    if len(out_features) > 0 and len(num_batches) == 0:
        raise RuntimeError(
            f"K-dimensional loss defined by linear_weight shape {tuple(w.shape)} requires"
            f" batched input, (N, {in_features}), got unbatched"
            f" input with shape {tuple(x.shape)}"
        )
    logits_shape = (*num_batches, num_classes, *out_features)
    if target.shape == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore_index = ignore_index if ignore_index is not None else -100
    if _chunked_path_taken(options, out_features, reduction, label_smoothing, target, bias):
        raise NotImplementedError(
            "linear_cross_entropy with options (torch's chunked path) is not supported; pass options=None"
        )
    if out_features:
        w = w.reshape((math.prod(out_features, start=num_classes), in_features))
        if bias is not None:
            bias = bias.reshape(math.prod(out_features, start=num_classes))
    logits = _nn_functional.linear(x, w, bias).reshape(logits_shape)
    return _nn_functional.cross_entropy(
        logits,
        target,
        weight=weight,
        reduction=reduction,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )
