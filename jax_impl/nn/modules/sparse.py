"""``torch.nn.Embedding`` as a ``flax.nnx`` module.

``weight`` is ``(num_embeddings, embedding_dim)``, initialised as torch's
``reset_parameters``: ``normal_(0, 1)``, then the ``padding_idx`` row zeroed.
With ``rngs=None`` the normal draw comes from ``jax_impl.nn.init.normal_`` on
torch's global stream: torch's numbers (its CPU Box-Muller kernels), so the
same seed gives the same table.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn._functional_sparse import embedding_renorm_, padding_index
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.module import Buffer, Module

__all__ = ["Embedding"]


class Embedding(Module):
    """``torch.nn.Embedding``: a lookup table, ``weight[input]``.

    Args:
      num_embeddings: rows of the table.
      embedding_dim: size of each row.
      padding_idx: this row starts as zeros and gets no gradient (negative counts from the end).
      max_norm: rows looked up with a larger ``norm_type``-norm are rescaled
        to ``max_norm`` first, and the rescaled table is stored back into
        ``weight`` (as torch rescales in place).
      norm_type: ``p`` of the p-norm for ``max_norm``.
      scale_grad_by_freq: scale each row's gradient by ``1 / count`` of its index in the batch.
      sparse: accepted for torch's signature; JAX gradients are dense.
      _weight: an initial table instead of the random init.
      _freeze: hold the table as a :class:`Buffer` (not trained), torch's ``requires_grad=False``.
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for the init, or ``None`` for torch's global stream.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight=None, _freeze: bool = False, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        dtype = factory_dtype(device, dtype)
        padding_idx = padding_index(padding_idx, num_embeddings)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            table = init.normal_(init_key(rngs), (num_embeddings, embedding_dim), dtype)
            if padding_idx is not None:
                table = table.at[padding_idx].set(0)
        else:
            table = jnp.asarray(_weight, dtype)
            if table.shape != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
        self.weight = Buffer(table) if _freeze else nnx.Param(table)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """``torch.nn.Embedding.from_pretrained``: a layer holding ``embeddings`` ``(rows, dim)``."""
        embeddings = jnp.asarray(embeddings)
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze, dtype=embeddings.dtype)

    def __call__(self, input):
        weight = self.weight[...]
        if self.max_norm is not None:
            # torch rescales the referenced rows of its weight in place; keep the rescaled table.
            self.weight[...] = embedding_renorm_(weight, input, self.max_norm, self.norm_type)
        return F.embedding(input, weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)
