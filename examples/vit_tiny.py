"""A tiny Vision Transformer (torchvision's ``VisionTransformer`` layout, scaled down), in torch and as its twin.

A user model for ``parity run``: ``configs/vit_tiny_digits.yaml`` names both
classes by import path. The image is cut into patches by a strided
``Conv2d``, a learned class token is prepended, a learned position
embedding added, then pre-norm ``TransformerEncoderLayer`` blocks (GELU,
dropout), a final ``LayerNorm`` and a linear head on the class token. The
twin is the torch code with ``torch.nn`` replaced by ``jax_impl.nn``: same
attribute names, so the state-dict keys match.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
from flax import nnx

import jax_impl.nn as jnn
from jax_impl.nn import init as jinit


def _layer_kwargs(dim: int, heads: int, mlp_dim: int, dropout: float) -> dict:
    return {"d_model": dim, "nhead": heads, "dim_feedforward": mlp_dim, "dropout": dropout,
            "activation": "gelu", "batch_first": True, "norm_first": True}


class ViTTiny(torch.nn.Module):
    """Patch embedding ``Conv2d(in_channels, dim, patch_size, stride=patch_size)``, class token, position
    embedding, ``depth`` pre-norm encoder layers, ``LayerNorm`` and ``Linear(dim, num_classes)``.

    Unlike ``torch.nn.TransformerEncoder`` (deep copies of one layer), each
    layer is built on its own, so the layers start from different weights,
    as torchvision's ViT does.
    """

    def __init__(self, image_size: int = 8, patch_size: int = 2, in_channels: int = 1, num_classes: int = 10,
                 dim: int = 32, depth: int = 4, heads: int = 4, mlp_dim: int = 64, dropout: float = 0.1) -> None:
        super().__init__()
        tokens = (image_size // patch_size) ** 2 + 1
        self.conv_proj = torch.nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.class_token = torch.nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = torch.nn.Parameter(torch.empty(1, tokens, dim).normal_(std=0.02))
        self.dropout = torch.nn.Dropout(dropout)
        kwargs = _layer_kwargs(dim, heads, mlp_dim, dropout)
        self.layers = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(**kwargs) for _ in range(depth)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)  # (N, patches, dim)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.dropout(x + self.pos_embedding)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


class JaxViTTiny(jnn.Module):
    """:class:`ViTTiny` on ``jax_impl.nn``."""

    def __init__(self, image_size: int = 8, patch_size: int = 2, in_channels: int = 1, num_classes: int = 10,
                 dim: int = 32, depth: int = 4, heads: int = 4, mlp_dim: int = 64, dropout: float = 0.1) -> None:
        tokens = (image_size // patch_size) ** 2 + 1
        self.conv_proj = jnn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.class_token = nnx.Param(jnp.zeros((1, 1, dim)))
        self.pos_embedding = nnx.Param(jinit.normal_(None, (1, tokens, dim), std=0.02))
        self.dropout = jnn.Dropout(dropout)  # torch's masks, from the global generator torch's would use
        kwargs = _layer_kwargs(dim, heads, mlp_dim, dropout)
        self.layers = jnn.ModuleList([jnn.TransformerEncoderLayer(**kwargs) for _ in range(depth)])
        self.ln = jnn.LayerNorm(dim)
        self.head = jnn.Linear(dim, num_classes)

    def __call__(self, x):
        x = self.conv_proj(x)
        n, dim = x.shape[:2]
        x = x.reshape(n, dim, -1).transpose(0, 2, 1)
        x = jnp.concatenate([jnp.broadcast_to(self.class_token[...], (n, 1, dim)), x], axis=1)
        x = self.dropout(x + self.pos_embedding[...])
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])
