"""torch.nn.functional's ``scaled_dot_product_attention`` and ``multi_head_attention_forward``.

Both follow torch's CPU reference paths operation for operation:

- ``scaled_dot_product_attention`` is aten's ``_scaled_dot_product_attention_math``
  (``aten/src/ATen/native/transformers/attention.cpp``): ``q`` and ``k`` are each
  multiplied by ``sqrt(scale)``, the mask added, then ``_safe_softmax`` (a row
  whose every score is ``-inf`` gives zeros, not NaN, and no gradient) and
  ``at::dropout``, whose mask is torch's (one draw per attention weight, C order,
  from ``jax_impl.random``'s global generator when ``rng=None``). Without dropout
  torch's CPU may run its flash kernel instead, which sums in another order:
  the results agree to rounding.
- ``multi_head_attention_forward`` is ``torch/nn/functional.py``'s function:
  in-projections, ``bias_k``/``bias_v`` and zero-attention columns, bool masks
  turned into ``-inf`` additive masks, key-padding and attention masks merged,
  then with ``need_weights`` the explicit ``baddbmm`` / ``softmax`` / ``dropout``
  / ``bmm`` path (weights returned, a fully masked row is NaN as in torch), and
  without it the scaled-dot-product path above.
"""

from __future__ import annotations

import math
import warnings

import jax.numpy as jnp

from jax_impl import amp
from jax_impl.nn import _gemm
from jax_impl.nn._functional_dropout import dropout
from jax_impl.nn._functional_loss import softmax

__all__ = ["multi_head_attention_forward", "scaled_dot_product_attention"]



def _matmul(a, b):
    # torch's matmul, bmm and baddbmm are on autocast's lower_precision_fp list.
    return _gemm.matmul(*amp.cast_inputs("matmul", a, b))


def _linear(x, w, b):
    return _gemm.linear(*amp.cast_inputs("linear", x, w, b))


def _safe_softmax(x):
    """aten ``_safe_softmax`` on the last axis: rows of only ``-inf`` give zeros and pass no gradient."""
    dead = jnp.all(x == -jnp.inf, axis=-1, keepdims=True)
    out = softmax(jnp.where(dead, jnp.zeros((), x.dtype), x), dim=-1)
    return jnp.where(dead, jnp.zeros((), x.dtype), out)


def _bool_to_additive(mask, dtype, masked_value: bool):
    """An additive float mask: ``-inf`` where ``mask == masked_value``, 0 elsewhere."""
    return jnp.where(mask == masked_value, jnp.asarray(-jnp.inf, dtype), jnp.zeros((), dtype))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, *, rng=None):
    """``torch.nn.functional.scaled_dot_product_attention``: ``dropout(softmax(q k^T * scale + mask)) v``.

    Args:
      query: ``(*, Hq, L, E)``.
      key: ``(*, H, S, E)``.
      value: ``(*, H, S, Ev)``.
      attn_mask: broadcastable to ``(*, Hq, L, S)``; bool (``True`` takes part
        in attention) or float (added to the scores).
      dropout_p: dropout probability on the attention weights (applied
        whenever positive: this function has no training flag, as torch's).
      is_causal: mask out ``j > i`` (top-left aligned, as torch's ``tril``);
        ``attn_mask`` must then be ``None``.
      scale: the score scale; ``None`` is ``1 / sqrt(E)``.
      enable_gqa: let ``H`` divide ``Hq``, repeating each key/value head ``Hq // H`` times.
      rng: ``None`` draws torch's dropout mask from the global generator; a jax
        PRNG key draws a jax mask instead.

    Returns:
      ``(*, Hq, L, Ev)``.
    """
    q, k, v = amp.cast_inputs("scaled_dot_product_attention", jnp.asarray(query), jnp.asarray(key),
                              jnp.asarray(value))
    if attn_mask is not None:
        attn_mask, = amp.cast_inputs("scaled_dot_product_attention", jnp.asarray(attn_mask))
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # aten scales q and k by sqrt(|scale|) each (the sign goes on q), for stability.
    factor = math.sqrt(abs(scale))
    q = q * (-factor if scale < 0 else factor)
    mask = None
    if is_causal:
        mask = _bool_to_additive(jnp.tril(jnp.ones((L, S), bool)), q.dtype, masked_value=False)
    elif attn_mask is not None:
        attn_mask = jnp.asarray(attn_mask)
        mask = _bool_to_additive(attn_mask, q.dtype, False) if attn_mask.dtype == bool else attn_mask
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k = jnp.repeat(k, repeat, axis=-3)
        v = jnp.repeat(v, repeat, axis=-3)
    scores = _matmul(q, jnp.swapaxes(k, -2, -1) * factor)
    if mask is not None:
        scores = scores + mask
    attn = _safe_softmax(scores)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True, rng=rng)
    return _matmul(attn, v)


def _canonical_mask(mask, name: str, other, other_name: str, dtype, check_other: bool = True):
    """``torch.nn.functional._canonical_mask``: bool masks become ``-inf`` where ``True``."""
    if mask is None:
        return None
    mask = jnp.asarray(mask)
    is_float = jnp.issubdtype(mask.dtype, jnp.floating)
    if mask.dtype != bool and not is_float:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if check_other and other is not None and mask.dtype != jnp.asarray(other).dtype:
        warnings.warn(
            f"Support for mismatched {name} and {other_name} is deprecated. Use same type for both instead.",
            stacklevel=3,
        )
    return mask if is_float else _bool_to_additive(mask, dtype, masked_value=True)


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """``torch.nn.functional._mha_shape_check``: ``True`` for batched (3-D) input."""
    if query.ndim not in (2, 3):
        raise AssertionError(
            f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D query tensor")
    batched = query.ndim == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertionError(
            f"For {kind} `query`, expected `key` and `value` to be {query.ndim}-D"
            f" but found {key.ndim}-D and {value.ndim}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        raise AssertionError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {query.ndim - 1}-D"
            f" but found {key_padding_mask.ndim}-D tensor instead")
    if attn_mask is not None:
        if attn_mask.ndim not in (2, 3):
            raise AssertionError(
                f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                f" but found {attn_mask.ndim}-D tensor instead")
        if not batched and attn_mask.ndim == 3:
            expected = (num_heads, query.shape[0], key.shape[0])
            if tuple(attn_mask.shape) != expected:
                raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got {tuple(attn_mask.shape)}")
    return batched


def _pad_last(x):
    """``F.pad(x, (0, 1))``: one zero column at the end of the last axis."""
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 1)])


def multi_head_attention_forward(
    query, key, value, embed_dim_to_check: int, num_heads: int, in_proj_weight, in_proj_bias,
    bias_k, bias_v, add_zero_attn: bool, dropout_p: float, out_proj_weight, out_proj_bias,
    training: bool = True, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
    use_separate_proj_weight: bool = False, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
    static_k=None, static_v=None, average_attn_weights: bool = True, is_causal: bool = False, *, rng=None,
):
    """``torch.nn.functional.multi_head_attention_forward`` (sequence-first layout).

    Args:
      query: ``(L, N, E)`` or unbatched ``(L, E)``.
      key: ``(S, N, Ek)`` or ``(S, Ek)``.
      value: ``(S, N, Ev)`` or ``(S, Ev)``.
      embed_dim_to_check: ``E``; ``AssertionError`` if ``query``'s last axis differs.
      num_heads: heads; must divide ``E``.
      in_proj_weight: packed ``(3E, E)`` q/k/v projection (unless ``use_separate_proj_weight``).
      in_proj_bias: packed ``(3E,)`` bias or ``None``.
      bias_k: ``(1, 1, E)`` appended to the keys, or ``None``.
      bias_v: ``(1, 1, E)`` appended to the values, or ``None``.
      add_zero_attn: append a zero key and value to every sequence.
      dropout_p: dropout on the attention weights when ``training``.
      out_proj_weight: ``(E, E)``.
      out_proj_bias: ``(E,)`` or ``None``.
      training: apply dropout.
      key_padding_mask: ``(N, S)`` / ``(S,)``; bool (``True`` is ignored) or float (added).
      need_weights: also return the attention weights (the explicit path).
      attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; bool (``True`` is
        masked out) or float (added).
      use_separate_proj_weight: use ``q_proj_weight`` ``(E, E)``,
        ``k_proj_weight`` ``(E, Ek)``, ``v_proj_weight`` ``(E, Ev)``.
      static_k: ``(N * num_heads, S, E / num_heads)`` keys used instead of the projected ones.
      static_v: likewise for values.
      average_attn_weights: average the returned weights over heads.
      is_causal: a hint that ``attn_mask`` is causal; with no key padding mask
        and ``need_weights=False`` torch then drops ``attn_mask`` and applies the
        causal mask itself, and so does this function. ``attn_mask`` is required.
      rng: ``None`` draws torch's dropout mask from the global generator; a jax
        key draws a jax mask.

    Returns:
      ``(attn_output, attn_weights)``: ``(L, N, E)`` (``(L, E)`` unbatched) and
      ``(N, L, S)`` / ``(N, num_heads, L, S)`` weights, or ``None`` without ``need_weights``.
    """
    same = query is key and key is value
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    if same:
        key = value = query  # self-attention: one array, projected once (below)
    kpm = None if key_padding_mask is None else jnp.asarray(key_padding_mask)
    mask = None if attn_mask is None else jnp.asarray(attn_mask)
    batched = _check_shapes(query, key, value, kpm, mask, num_heads)
    if not batched:
        query, key, value = query[:, None], key[:, None], value[:, None]
        if same:
            key = value = query
        if kpm is not None:
            kpm = kpm[None]
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    kpm = _canonical_mask(kpm, "key_padding_mask", mask, "attn_mask", query.dtype)
    if is_causal and mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
            "`generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and kpm is None and not need_weights:
        mask = None
    else:
        mask = _canonical_mask(mask, "attn_mask", None, "", query.dtype, check_other=False)
        if kpm is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if key.shape[:2] != value.shape[:2]:
            raise AssertionError(
                f"key's sequence and batch dims {key.shape[:2]} do not match value's {value.shape[:2]}")
        weights = (q_proj_weight, k_proj_weight, v_proj_weight)
    else:
        if key.shape != value.shape:
            raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
        weights = None  # the packed (3E, E) weight, split below unless self-attention uses it whole
    bias = None if in_proj_bias is None else jnp.asarray(in_proj_bias)
    if weights is None and query is key and key is value:
        # torch's _in_projection_packed: self-attention projects once with the packed weight (the same sums
        # per output as three products, in one larger GEMM), then splits.
        q, k, v = jnp.split(_linear(query, jnp.asarray(in_proj_weight), bias), 3, axis=-1)
    else:
        weights = jnp.split(jnp.asarray(in_proj_weight), 3) if weights is None else weights
        biases = (None,) * 3 if bias is None else jnp.split(bias, 3)
        q, k, v = (_linear(x, jnp.asarray(w), b) for x, w, b in zip((query, key, value), weights, biases))

    if mask is not None:
        if mask.ndim == 2:
            if mask.shape != (tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {mask.shape}, but should be {(tgt_len, src_len)}.")
            mask = mask[None]
        elif mask.shape != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {mask.shape}, but should be "
                               f"{(bsz * num_heads, tgt_len, src_len)}.")
    if (bias_k is None) != (bias_v is None):
        raise AssertionError("bias_k is set but bias_v is None" if bias_v is None else
                             "bias_v is set but bias_k is None")
    if bias_k is not None:
        if static_k is not None or static_v is not None:
            raise AssertionError("bias cannot be added to static key." if static_k is not None else
                                 "bias cannot be added to static value.")
        k = jnp.concatenate([k, jnp.tile(jnp.asarray(bias_k), (1, bsz, 1))])
        v = jnp.concatenate([v, jnp.tile(jnp.asarray(bias_v), (1, bsz, 1))])
        mask = None if mask is None else _pad_last(mask)
        kpm = None if kpm is None else _pad_last(kpm)

    q = q.reshape(tgt_len, bsz * num_heads, head_dim).swapaxes(0, 1)
    k = k.reshape(k.shape[0], bsz * num_heads, head_dim).swapaxes(0, 1) if static_k is None else jnp.asarray(static_k)
    v = v.reshape(v.shape[0], bsz * num_heads, head_dim).swapaxes(0, 1) if static_v is None else jnp.asarray(static_v)
    if add_zero_attn:
        k = jnp.concatenate([k, jnp.zeros((bsz * num_heads, 1, head_dim), k.dtype)], axis=1)
        v = jnp.concatenate([v, jnp.zeros((bsz * num_heads, 1, head_dim), v.dtype)], axis=1)
        mask = None if mask is None else _pad_last(mask)
        kpm = None if kpm is None else _pad_last(kpm)
    src_len = k.shape[1]
    if kpm is not None:
        if kpm.shape != (bsz, src_len):
            raise AssertionError(f"Expected key_padded_mask.shape to be {(bsz, src_len)}, but got {kpm.shape}")
        kpm = jnp.broadcast_to(kpm[:, None, None, :], (bsz, num_heads, 1, src_len)).reshape(
            bsz * num_heads, 1, src_len)
        mask = kpm if mask is None else mask + kpm
    if not training:
        dropout_p = 0.0

    if need_weights:
        q_scaled = q * math.sqrt(1.0 / float(q.shape[-1]))
        if is_causal and mask is None:
            raise AssertionError("FIXME: is_causal not implemented for need_weights")
        weights_ = _matmul(q_scaled, k.swapaxes(-2, -1))
        if mask is not None:
            # torch.baddbmm(mask, a, b) = mask + a @ b.
            weights_ = mask + weights_
        weights_ = softmax(weights_, dim=-1)
        if dropout_p > 0.0:
            weights_ = dropout(weights_, p=dropout_p, rng=rng)
        out = _matmul(weights_, v).swapaxes(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = _linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
        weights_ = weights_.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights_ = jnp.mean(weights_, axis=1)
        if not batched:
            out, weights_ = out[:, 0], weights_[0]
        return out, weights_

    if mask is not None:
        mask = mask[None] if mask.shape[0] == 1 else mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, rng=rng)
    out = out.transpose(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = _linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
    if not batched:
        out = out[:, 0]
    return out, None
