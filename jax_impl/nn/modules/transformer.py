"""``torch.nn.Transformer`` and its parts (``TransformerEncoderLayer``, ``TransformerDecoderLayer``,
``TransformerEncoder``, ``TransformerDecoder``) as ``flax.nnx`` modules.

Submodule names equal torch's (``self_attn``, ``linear1``, ``dropout``,
``linear2``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``; the decoder
layer adds ``multihead_attn``, ``norm3``, ``dropout3``; the encoder and
decoder hold ``layers.0 ...`` and ``norm``; ``Transformer`` holds ``encoder``
and ``decoder``), so ``state_dict`` keys match, and they are built in torch's
order, so with ``rngs=None`` the initial weights are torch's.
The forward is torch's non-fast path (``_sa_block`` / ``_mha_block`` /
``_ff_block``, post-norm or ``norm_first`` pre-norm), with the dropout masks
drawn in torch's order: attention weights, ``dropout1``, then the
feed-forward ``dropout``, ``dropout2`` (``dropout3`` in the decoder). torch's
eval-mode fast path (``_transformer_encoder_layer_fwd``, nested tensors) gives
the same values in another summation order, except that for padded
positions it returns zeros where this path returns the computed values.
torch's decoder has no fast path. In ``Transformer`` the fast path can only
touch the encoder (``batch_first=True``, eval mode, no gradient): the memory's
padded positions are then zeros (the final norm's bias after ``encoder.norm``)
in torch and computed values here; a decoder given the same padding as
``memory_key_padding_mask`` never reads them, so its output agrees to rounding.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn._materialize import cotangent_kept_in_memory
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.attention import MultiheadAttention
from jax_impl.nn.modules.container import ModuleList, Sequential
from jax_impl.nn.modules.dropout import Dropout
from jax_impl.nn.modules.linear import Linear
from jax_impl.nn.modules.module import Module
from jax_impl.nn.modules.normalization import LayerNorm

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


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
            # Each residual's input keeps its cotangent in memory: XLA:CPU would otherwise recompute the
            # sums of every deeper layer's cotangents inside each layer's gradient fusions.
            x = cotangent_kept_in_memory(x)
            x = x + sa(self.norm1(x))
            x = cotangent_kept_in_memory(x)
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
            x = cotangent_kept_in_memory(x)  # as in TransformerEncoderLayer
            x = x + sa(self.norm1(x))
            x = cotangent_kept_in_memory(x)
            x = x + mha(self.norm2(x))
            x = cotangent_kept_in_memory(x)
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


class TransformerDecoder(Module):
    """``torch.nn.TransformerDecoder``: ``num_layers`` deep copies of ``decoder_layer``, then ``norm``.

    As in torch, every layer starts from ``decoder_layer``'s weights (copies,
    not fresh draws).

    Args:
      decoder_layer: the layer to copy.
      num_layers: number of copies.
      norm: optional final module (e.g. ``LayerNorm``).
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None) -> None:
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        """Run the layers in turn on ``tgt``, each attending to ``memory``; every mask goes to every layer.

        ``tgt_is_causal=None`` passes ``False``: torch then tests whether
        ``tgt_mask`` is the causal mask only to pick a kernel, and an additive
        causal mask and the causal flag give the same values.
        """
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                           memory_is_causal=memory_is_causal)
        return output if self.norm is None else self.norm(output)


# torch's registration order where it differs from attribute-name order (flax keeps a copied module's attributes
# sorted by name): (own parameters, children). A MultiheadAttention registers its parameters before out_proj.
_REGISTRATION = {
    MultiheadAttention: (("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                          "bias_k", "bias_v"), ("out_proj",)),
    TransformerEncoderLayer: ((), ("self_attn", "linear1", "dropout", "linear2", "norm1", "norm2", "dropout1",
                                   "dropout2", "activation")),
    TransformerDecoderLayer: ((), ("self_attn", "multihead_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                   "norm3", "dropout1", "dropout2", "dropout3", "activation")),
    TransformerEncoder: ((), ("layers", "norm")),
    TransformerDecoder: ((), ("layers", "norm")),
}


def _parameters_in_torch_order(module: nnx.Module) -> list[nnx.Param]:
    """``torch.nn.Module.parameters()``: a module's own parameters, then its children's, depth first.

    The transformer classes and ``MultiheadAttention`` follow torch's
    registration order (``_REGISTRATION``), ``ModuleList`` / ``Sequential``
    their index order; any other module its attributes in ``vars`` order
    (assignment order for a module as built, name order once flax has
    copied it), which is torch's order for layers whose only multi-dimensional
    parameter is ``weight``. A parameter or module reached twice counts once,
    as torch's memo does.
    """
    seen: set[int] = set()
    found: list[nnx.Param] = []

    def visit(m) -> None:
        if not isinstance(m, nnx.Module) or id(m) in seen:
            return
        seen.add(id(m))
        if isinstance(m, (ModuleList, Sequential)):
            own, children = [], list(m)
        elif type(m) in _REGISTRATION:
            names, child_names = _REGISTRATION[type(m)]
            own = [getattr(m, name, None) for name in names]
            children = [getattr(m, name, None) for name in child_names]
        else:
            own = children = list(vars(m).values())
        for value in own:
            if isinstance(value, nnx.Param) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        for child in children:
            visit(child)

    visit(module)
    return found


class Transformer(Module):
    """``torch.nn.Transformer``: an encoder over ``src`` and a decoder over ``tgt`` attending to its output.

    ``memory = encoder(src)``, ``output = decoder(tgt, memory)``, the
    encoder a :class:`TransformerEncoder` of ``num_encoder_layers`` copies of
    a :class:`TransformerEncoderLayer` with a final ``LayerNorm``, the decoder
    likewise with :class:`TransformerDecoderLayer`. After building both (each
    default init drawn as torch draws it), ``_reset_parameters`` redraws every
    parameter of more than one dimension with ``xavier_uniform_``, in
    torch's ``parameters()`` order: with ``rngs=None``, after the same seed,
    the state is torch's.

    Args:
      d_model: model dimension.
      nhead: attention heads.
      num_encoder_layers: encoder layers.
      num_decoder_layers: decoder layers.
      dim_feedforward: hidden size of the feed-forward blocks.
      dropout: dropout probability.
      activation: ``"relu"``, ``"gelu"`` or a callable.
      custom_encoder: used instead of the default encoder (its parameters are redrawn too, as torch does).
      custom_decoder: used instead of the default decoder.
      layer_norm_eps: LayerNorm ``eps``.
      batch_first: ``(N, S, E)`` instead of ``(S, N, E)``.
      norm_first: pre-norm layers.
      bias: biases in the linear layers and LayerNorms.
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for init and dropout, or ``None`` for torch's global stream.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias, device, dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(*layer_args, rngs=rngs)
            encoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(*layer_args, rngs=rngs)
            decoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm)
        self._reset_parameters(rngs)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self, rngs: nnx.Rngs | None = None) -> None:
        """torch's ``_reset_parameters``: ``xavier_uniform_`` on every parameter with ``ndim > 1``, in order."""
        for param in _parameters_in_torch_order(self):
            value = param[...]
            if value.ndim > 1:
                param[...] = init.xavier_uniform_(init_key(rngs), value.shape, value.dtype)

    def __call__(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                 tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal: bool | None = None,
                 tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        """``src`` ``(S, N, E)``, ``tgt`` ``(T, N, E)`` (``(N, S, E)`` / ``(N, T, E)`` batch-first,
        ``(S, E)`` / ``(T, E)`` unbatched); masks as :class:`MultiheadAttention`'s. Returns ``(T, N, E)``."""
        batched = src.ndim == 3
        batch_axis = 0 if self.batch_first else 1
        if batched and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """torch's causal mask: ``triu(full((sz, sz), -inf), diagonal=1)``, ``-inf`` above the diagonal, 0 elsewhere.

        ``dtype`` defaults to float32 (torch's default dtype); ``device`` only ``None`` / ``"cpu"``.
        """
        dtype = factory_dtype(device, dtype)
        return jnp.triu(jnp.full((sz, sz), -jnp.inf, dtype), k=1)
