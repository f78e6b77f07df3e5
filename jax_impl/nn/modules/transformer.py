"""``torch.nn.TransformerEncoderLayer``, ``TransformerEncoder`` and ``TransformerDecoderLayer`` as ``flax.nnx`` modules.

Submodule names equal torch's (``self_attn``, ``linear1``, ``dropout``,
``linear2``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``; the decoder
layer adds ``multihead_attn``, ``norm3``, ``dropout3``; the encoder holds
``layers.0 ...`` and ``norm``), so ``state_dict`` keys match, and they are
built in torch's order, so with ``rngs=None`` the initial weights are torch's.
The forward is torch's non-fast path (``_sa_block`` / ``_mha_block`` /
``_ff_block``, post-norm or ``norm_first`` pre-norm), with the dropout masks
drawn in torch's order: attention weights, ``dropout1``, then the
feed-forward ``dropout``, ``dropout2`` (``dropout3`` in the decoder). torch's
eval-mode fast path (``_transformer_encoder_layer_fwd``, nested tensors) gives
the same values in another summation order, except that for padded
positions it returns zeros where this path returns the computed values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn.modules.attention import MultiheadAttention
from jax_impl.nn.modules.container import ModuleList
from jax_impl.nn.modules.dropout import Dropout
from jax_impl.nn.modules.linear import Linear
from jax_impl.nn.modules.module import Module
from jax_impl.nn.modules.normalization import LayerNorm

__all__ = ["TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer"]


def _activation(activation: str | Callable) -> Callable:
    """torch's ``_get_activation_fn``: ``"relu"`` / ``"gelu"`` or any callable."""
    if not isinstance(activation, str):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _FeedForwardLayer(Module):
    """The parts torch's encoder and decoder layers share: feed-forward block and norm placement."""

    def _build_feed_forward(self, d_model, dim_feedforward, dropout, activation, bias, dtype, rngs) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype, rngs=rngs)
        self.dropout = Dropout(dropout, rngs=rngs)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype, rngs=rngs)

    def _ff_block(self, x, out_dropout: Dropout):
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @staticmethod
    def _attend(attn: MultiheadAttention, x, memory, mask, key_padding_mask, is_causal, out_dropout: Dropout):
        out = attn(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                   is_causal=is_causal)[0]
        if attn.batch_first and out.ndim == 3:
            # torch's batch-first attention output is a (L, N, E) tensor transposed to (N, L, E); dropout's
            # mask (empty_like, strides preserved) is drawn in that memory order, so draw it as (L, N, E).
            return out_dropout(out, mask_order=(1, 0, 2))
        return out_dropout(out)


class TransformerEncoderLayer(_FeedForwardLayer):
    """``torch.nn.TransformerEncoderLayer``: self-attention then a feed-forward block, each with residual and LayerNorm.

    Args:
      d_model: model dimension.
      nhead: attention heads.
      dim_feedforward: hidden size of the feed-forward block.
      dropout: dropout probability (attention weights, both residual branches, feed-forward hidden).
      activation: ``"relu"``, ``"gelu"`` or a callable.
      layer_norm_eps: LayerNorm ``eps``.
      batch_first: ``(N, S, E)`` instead of ``(S, N, E)``.
      norm_first: pre-norm (``x + f(norm(x))``) instead of post-norm (``norm(x + f(x))``).
      bias: biases in the linear layers and LayerNorms.
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for init and dropout, or ``None`` for torch's global stream.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device, dtype=dtype, rngs=rngs)
        self._build_feed_forward(d_model, dim_feedforward, dropout, activation, bias, dtype, rngs)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout, rngs=rngs)
        self.dropout2 = Dropout(dropout, rngs=rngs)
        self.activation = _activation(activation)

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """``src`` ``(S, N, E)`` (``(N, S, E)`` batch-first, ``(S, E)`` unbatched); masks as
        :class:`MultiheadAttention`'s ``attn_mask`` / ``key_padding_mask``."""
        x = src

        def sa(y):
            return self._attend(self.self_attn, y, y, src_mask, src_key_padding_mask, is_causal, self.dropout1)

        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + self._ff_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + self._ff_block(x, self.dropout2))
        return x


class TransformerDecoderLayer(_FeedForwardLayer):
    """``torch.nn.TransformerDecoderLayer``: self-attention, attention over ``memory``, feed-forward.

    Arguments as :class:`TransformerEncoderLayer`; the forward takes
    ``tgt``, ``memory`` and torch's ``tgt_mask``, ``memory_mask``,
    ``tgt_key_padding_mask``, ``memory_key_padding_mask``, ``tgt_is_causal``,
    ``memory_is_causal``.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias,
                                            device=device, dtype=dtype, rngs=rngs)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first,
                                                 bias=bias, device=device, dtype=dtype, rngs=rngs)
        self._build_feed_forward(d_model, dim_feedforward, dropout, activation, bias, dtype, rngs)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout, rngs=rngs)
        self.dropout2 = Dropout(dropout, rngs=rngs)
        self.dropout3 = Dropout(dropout, rngs=rngs)
        self.activation = _activation(activation)

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt

        def sa(y):
            return self._attend(self.self_attn, y, y, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self.dropout1)

        def mha(y):
            return self._attend(self.multihead_attn, y, memory, memory_mask, memory_key_padding_mask,
                                memory_is_causal, self.dropout2)

        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            x = x + self._ff_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + mha(x))
            x = self.norm3(x + self._ff_block(x, self.dropout3))
        return x


class TransformerEncoder(Module):
    """``torch.nn.TransformerEncoder``: ``num_layers`` deep copies of ``encoder_layer``, then ``norm``.

    As in torch, every layer starts from ``encoder_layer``'s weights (copies,
    not fresh draws).

    Args:
      encoder_layer: the layer to copy.
      num_layers: number of copies.
      norm: optional final module (e.g. ``LayerNorm``).
      enable_nested_tensor: accepted for torch's signature (nested tensors are torch's eval fast path).
      mask_check: accepted for torch's signature.
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal: bool | None = None):
        """Run the layers in turn; ``mask`` / ``src_key_padding_mask`` go to every layer.

        ``is_causal=None`` passes ``False``: torch then tests whether ``mask``
        is the causal mask only to pick a kernel, and an additive causal mask
        and the causal flag give the same values.
        """
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                           is_causal=bool(is_causal))
        return output if self.norm is None else self.norm(output)
