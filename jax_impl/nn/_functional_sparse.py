"""torch.nn.functional's ``embedding`` and torch's ``embedding_renorm_``, on immutable arrays.

torch's ``F.embedding`` (``torch/nn/functional.py``, ``aten/src/ATen/native/Embedding.cpp``)
looks rows up, gives the ``padding_idx`` row no gradient, can scale each
row's gradient by ``1 / count`` of its index in the batch, and with
``max_norm`` first rescales in place (without autograd) every referenced row
whose ``norm_type``-norm exceeds ``max_norm``. JAX arrays cannot be rescaled
in place, so :func:`embedding` returns the lookup of the rescaled rows and
:func:`embedding_renorm_` returns the rescaled table for the caller to keep
(``jax_impl.nn.Embedding`` stores it, as torch's module ends up holding it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["embedding", "embedding_renorm_", "padding_index"]


def _check_indices(input):
    idx = jnp.asarray(input)
    if not jnp.issubdtype(idx.dtype, jnp.integer):
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {idx.dtype} instead (while checking arguments for embedding)"
        )
    return idx


def padding_index(padding_idx, num_embeddings: int) -> int | None:
    """torch's normalisation of ``padding_idx`` (negative counts from the end)."""
    if padding_idx is None:
        return None
    if padding_idx > 0 and padding_idx >= num_embeddings:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if padding_idx < 0:
        if padding_idx < -num_embeddings:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx = num_embeddings + padding_idx
    return int(padding_idx)


def _exact_with_grad_of(value, source):
    """``value`` in the forward pass, ``source``'s gradient path in the backward pass.

    ``source - stop_gradient(source)`` is exactly zero, so the sum is ``value`` bit for bit.
    """
    return jax.lax.stop_gradient(value) + (source - jax.lax.stop_gradient(source))


def embedding_renorm_(weight, input, max_norm: float, norm_type: float = 2.0):
    """torch's ``embedding_renorm_`` as a pure function: the table with referenced rows rescaled.

    Every row ``i`` that ``input`` references with ``||weight[i]||_p > max_norm``
    becomes ``weight[i] * (max_norm / (norm + 1e-7))``, the scale formed in
    double as aten's ``embedding_renorm_cpu_``; the others are returned
    unchanged. No gradient flows through the rescaling (torch runs it under
    ``no_grad``).

    Args:
      weight: the table ``(num_embeddings, embedding_dim)``.
      input: integer indices of any shape.
      max_norm: the largest norm a referenced row may keep.
      norm_type: ``p`` of the p-norm.

    Returns:
      The rescaled table (``weight`` itself is not modified: JAX arrays are immutable).
    """
    w = jax.lax.stop_gradient(jnp.asarray(weight))
    idx = _check_indices(input).reshape(-1)
    referenced = jnp.zeros((w.shape[0],), bool).at[idx].set(True)
    p = float(norm_type)
    absw = jnp.abs(w)
    if p == float("inf"):
        norms = jnp.max(absw, axis=1)
    elif p == 0:
        norms = jnp.sum(absw != 0, axis=1).astype(w.dtype)
    elif p == 1:
        norms = jnp.sum(absw, axis=1)
    elif p == 2:
        norms = jnp.sqrt(jnp.sum(absw * absw, axis=1))
    else:
        norms = jnp.sum(absw**p, axis=1) ** (1 / p)
    norms = norms.astype(jnp.float64) if jax.config.jax_enable_x64 else norms
    scale = (max_norm / (norms + 1e-7)).astype(w.dtype)
    rescale = referenced & (norms > max_norm)
    return jnp.where(rescale[:, None], w * scale[:, None], w)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """``torch.nn.functional.embedding``: ``weight[input]``, shape ``(*input.shape, embedding_dim)``.

    Args:
      input: integer indices of any shape.
      weight: the table ``(num_embeddings, embedding_dim)``.
      padding_idx: positions holding this index give ``weight`` no gradient
        (negative values count from the end, as torch).
      max_norm: if given, rows referenced by ``input`` are first rescaled as
        :func:`embedding_renorm_` does and the lookup reads the rescaled rows;
        the rescaled table is not returned (torch writes it into ``weight``;
        call :func:`embedding_renorm_` to keep it).
      norm_type: ``p`` of the p-norm for ``max_norm``.
      scale_grad_by_freq: scale each row's gradient by ``1 / count`` of its index in ``input``.
      sparse: accepted for torch's signature; JAX gradients are dense.
    """
    del sparse
    idx = _check_indices(input)
    w = jnp.asarray(weight)
    if w.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    pad = padding_index(padding_idx, w.shape[0])
    if max_norm is not None:
        w = _exact_with_grad_of(embedding_renorm_(w, idx, max_norm, norm_type), w)
    out = jnp.take(w, idx, axis=0, mode="clip")
    if scale_grad_by_freq:
        counts = jnp.zeros((w.shape[0],), w.dtype).at[idx.reshape(-1)].add(1)
        # aten embedding_dense_backward divides each position's gradient by its index's count.
        out = jax.lax.stop_gradient(out) + (out - jax.lax.stop_gradient(out)) / counts[idx][..., None]
    if pad is not None:
        out = jnp.where((idx == pad)[..., None], jax.lax.stop_gradient(out), out)
    return out


