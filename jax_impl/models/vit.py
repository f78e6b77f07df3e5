"""A ViT on ``jax_impl.nn``'s transformer: the twin of ``torch_ref.models.VisionTransformer`` (same keys)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jax_impl import nn
from jax_impl.nn import init

__all__ = ["VisionTransformer", "vit_tiny"]


class VisionTransformer(nn.Module):
    """Patches by a strided conv, a class token, learned position embeddings, a pre-norm
    ``TransformerEncoder`` (GELU, LayerNorm eps 1e-6), a final LayerNorm and a linear head on the class token.

    ``torch_ref.models.VisionTransformer``'s computation and state-dict keys:
    ``x = cat([class_token, patches]) + pos_embedding``, then per layer
    ``x + attn(norm1(x))`` and ``x + linear2(gelu(linear1(norm2(x))))``,
    then ``head(ln(x)[:, 0])``.

    Args:
      image_size: input height = width, a multiple of ``patch_size``.
      patch_size: the side of a square patch.
      num_layers, num_heads, hidden_dim, mlp_dim: the encoder's depth, heads, width and feed-forward width.
      num_classes: outputs of the head.
      dropout: dropout in the encoder layers.
      rngs: init keys (and dropout's), or ``None`` for the global generator. The
        position embedding's N(0, 0.02) numbers are not torch's; load torch's
        weights (``parity.convert.load_torch_state_dict``) to start from them.
    """

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_layers: int = 12, num_heads: int = 3,
                 hidden_dim: int = 192, mlp_dim: int = 768, num_classes: int = 1000, dropout: float = 0.0, *,
                 rngs: nnx.Rngs | None = None) -> None:
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, stride=patch_size, rngs=rngs)
        self.class_token = nnx.Param(jnp.zeros((1, 1, hidden_dim)))
        seq = (image_size // patch_size) ** 2 + 1
        self.pos_embedding = nnx.Param(init.normal_(rngs.params() if rngs is not None else None, (1, seq, hidden_dim),
                                                    std=0.02))
        layer = nn.TransformerEncoderLayer(hidden_dim, num_heads, mlp_dim, dropout, activation="gelu",
                                           layer_norm_eps=1e-6, batch_first=True, norm_first=True, rngs=rngs)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes, rngs=rngs)

    def __call__(self, x):
        n = x.shape[0]
        x = self.conv_proj(x)
        x = x.reshape(n, x.shape[1], -1).transpose(0, 2, 1)  # (N, patches, hidden)
        token = jnp.broadcast_to(self.class_token[...], (n, 1, x.shape[2]))
        x = jnp.concatenate([token, x], axis=1) + self.pos_embedding[...]
        return self.head(self.ln(self.encoder(x))[:, 0])


def vit_tiny(num_classes: int = 1000, image_size: int = 224, *, rngs: nnx.Rngs | None = None,
             **kwargs) -> VisionTransformer:
    """ViT-Ti/16 (DeiT-tiny's shape): patch 16, 12 layers, 3 heads, width 192, feed-forward 768."""
    return VisionTransformer(image_size=image_size, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192,
                             mlp_dim=768, num_classes=num_classes, rngs=rngs, **kwargs)
