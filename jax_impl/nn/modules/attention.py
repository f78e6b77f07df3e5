"""``torch.nn.MultiheadAttention`` as a ``flax.nnx`` module.

Parameters carry torch's ``state_dict`` names: ``in_proj_weight`` ``(3E, E)``
(or ``q_proj_weight`` / ``k_proj_weight`` / ``v_proj_weight`` when ``kdim`` or
``vdim`` differ from ``embed_dim``), ``in_proj_bias`` ``(3E,)``,
``out_proj.weight`` / ``out_proj.bias``, and ``bias_k`` / ``bias_v``
``(1, 1, E)`` with ``add_bias_kv``. The init follows torch's ``__init__``
and ``_reset_parameters`` in torch's order: ``out_proj`` as a ``Linear``
(its weight and bias drawn), then ``xavier_uniform_`` on the input
projection(s), then ``in_proj_bias`` and ``out_proj.bias`` set to zero, then
``xavier_normal_`` on ``bias_k`` and ``bias_v``. With ``rngs=None`` every
draw, uniform and normal, is torch's numbers from the global stream.

The forward is torch's non-fast path (``F.multi_head_attention_forward``);
torch's eval-mode fast path (``_native_multi_head_attention``) computes the
same values in another summation order.
"""

from __future__ import annotations

from flax import nnx

from jax_impl.nn import init
from jax_impl.nn._functional_attention import multi_head_attention_forward
from jax_impl.nn.modules._utils import factory_dtype, init_key
from jax_impl.nn.modules.linear import Linear
from jax_impl.nn.modules.module import Module

__all__ = ["MultiheadAttention"]


def _value(param):
    return None if param is None else param[...]


class MultiheadAttention(Module):
    """``torch.nn.MultiheadAttention``: ``softmax(q k^T / sqrt(E / num_heads) + mask) v`` per head.

    Args:
      embed_dim: model dimension ``E``.
      num_heads: heads; must divide ``embed_dim``.
      dropout: dropout on the attention weights in training mode.
      bias: learn input and output projection biases.
      add_bias_kv: learn ``bias_k`` / ``bias_v`` appended to the keys and values.
      add_zero_attn: append a zero key and value to every sequence.
      kdim: key feature size (default ``embed_dim``).
      vdim: value feature size (default ``embed_dim``).
      batch_first: inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.
      device: only ``None`` / ``"cpu"``.
      dtype: parameter dtype (default float32).
      rngs: ``nnx.Rngs`` for the init and (its ``'dropout'`` stream) the
        attention dropout, or ``None`` for torch's global stream and torch's masks.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None,
                 *, rngs: nnx.Rngs | None = None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                             f"and num_heads={num_heads} instead")
        dtype = factory_dtype(device, dtype)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.add_zero_attn = add_zero_attn
        self.rngs = rngs
        # torch builds out_proj (drawing its Linear init) before _reset_parameters draws the rest, and registers
        # it after its own parameters: assigned last, so the attribute order is named_parameters()'.
        out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype, rngs=rngs)
        E = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nnx.Param(init.xavier_uniform_(init_key(rngs), (3 * E, E), dtype))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = nnx.Param(init.xavier_uniform_(init_key(rngs), (E, E), dtype))
            self.k_proj_weight = nnx.Param(init.xavier_uniform_(init_key(rngs), (E, self.kdim), dtype))
            self.v_proj_weight = nnx.Param(init.xavier_uniform_(init_key(rngs), (E, self.vdim), dtype))
        if bias:
            self.in_proj_bias = nnx.Param(init.zeros_(None, (3 * E,), dtype))
            out_proj.bias = nnx.Param(init.zeros_(None, (E,), dtype))
        else:
            self.in_proj_bias = None
        if add_bias_kv:
            self.bias_k = nnx.Param(init.xavier_normal_(init_key(rngs), (1, 1, E), dtype))
            self.bias_v = nnx.Param(init.xavier_normal_(init_key(rngs), (1, 1, E), dtype))
        else:
            self.bias_k = self.bias_v = None
        self.out_proj = out_proj

    def __call__(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                 average_attn_weights: bool = True, is_causal: bool = False):
        """Attend ``query`` to ``key``/``value``; returns ``(attn_output, attn_weights or None)``.

        Shapes (``batch_first=False``): query ``(L, N, E)``, key ``(S, N, kdim)``,
        value ``(S, N, vdim)``; unbatched inputs drop ``N`` (``batch_first`` is
        then ignored, as torch). ``key_padding_mask`` ``(N, S)``: bool ``True``
        ignores that key, float is added. ``attn_mask`` ``(L, S)`` or
        ``(N * num_heads, L, S)``: bool ``True`` masks out, float is added.
        ``is_causal`` is torch's hint: it needs ``attn_mask``, and with
        ``need_weights=False`` and no ``key_padding_mask`` the causal mask
        replaces ``attn_mask``. Weights are ``(N, L, S)`` averaged over heads,
        else ``(N, num_heads, L, S)``.
        """
        batched = query.ndim == 3
        if self.batch_first and batched:
            # As torch's forward: self-attention stays one array (multi_head_attention_forward then
            # projects it once with the packed weight).
            if query is key and key is value:
                query = key = value = query.swapaxes(0, 1)
            else:
                query, key, value = (x.swapaxes(0, 1) for x in (query, key, value))
        draws = self.training and self.dropout > 0
        rng = self.rngs.dropout() if draws and self.rngs is not None else None
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, _value(self.in_proj_weight),
            _value(self.in_proj_bias), _value(self.bias_k), _value(self.bias_v), self.add_zero_attn, self.dropout,
            self.out_proj.weight[...], _value(self.out_proj.bias), training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim, q_proj_weight=_value(self.q_proj_weight),
            k_proj_weight=_value(self.k_proj_weight), v_proj_weight=_value(self.v_proj_weight),
            average_attn_weights=average_attn_weights, is_causal=is_causal, rng=rng,
        )
        if self.batch_first and batched:
            out = out.swapaxes(0, 1)
        return out, weights

