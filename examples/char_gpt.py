"""A GPT-style character language model, in torch and as its jax_impl twin.

A user model for ``parity run``: ``configs/char_gpt.yaml`` names both classes
by import path, with :mod:`examples.char_data` as the data set. Token and
position embeddings, dropout, pre-norm ``TransformerEncoderLayer`` blocks
under a causal mask (the decoder-only GPT block: causal self-attention and a
GELU MLP), a final ``LayerNorm``, and an output head tied to the token
embedding. The logits come out as ``(N, vocab, T)``, so ``CrossEntropyLoss``
takes the ``(N, T)`` next-character targets as they are and ``argmax(1)`` is
the per-character prediction.

The head is tied by using the embedding matrix itself
(``F.linear(x, tok_emb.weight)``) rather than a ``Linear`` whose ``weight``
is set to the embedding's: the state dict then holds the shared tensor once,
under ``tok_emb.weight``, on both sides.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch
import torch.nn.functional as F

import jax_impl.nn as jnn
import jax_impl.nn.functional as JF


def _block_kwargs(dim: int, heads: int, mlp_dim: int, dropout: float) -> dict:
    return {"d_model": dim, "nhead": heads, "dim_feedforward": mlp_dim, "dropout": dropout,
            "activation": "gelu", "batch_first": True, "norm_first": True}


class CharGPT(torch.nn.Module):
    """``Embedding(vocab_size, dim)`` + ``Embedding(block_size, dim)``, ``Dropout``, ``depth`` causal pre-norm
    blocks, ``LayerNorm``, tied head; input ``(N, T)`` token ids (``T <= block_size``), output ``(N, vocab, T)``."""

    def __init__(self, vocab_size: int = 96, block_size: int = 32, dim: int = 32, depth: int = 2, heads: int = 4,
                 mlp_dim: int = 128, dropout: float = 0.1) -> None:
        super().__init__()
        self.tok_emb = torch.nn.Embedding(vocab_size, dim)
        self.pos_emb = torch.nn.Embedding(block_size, dim)
        self.drop = torch.nn.Dropout(dropout)
        kwargs = _block_kwargs(dim, heads, mlp_dim, dropout)
        self.blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(**kwargs) for _ in range(depth)])
        self.ln_f = torch.nn.LayerNorm(dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t)))
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t, dtype=x.dtype)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return F.linear(self.ln_f(x), self.tok_emb.weight).transpose(1, 2)


class JaxCharGPT(jnn.Module):
    """:class:`CharGPT` on ``jax_impl.nn``."""

    def __init__(self, vocab_size: int = 96, block_size: int = 32, dim: int = 32, depth: int = 2, heads: int = 4,
                 mlp_dim: int = 128, dropout: float = 0.1) -> None:
        self.tok_emb = jnn.Embedding(vocab_size, dim)
        self.pos_emb = jnn.Embedding(block_size, dim)
        self.drop = jnn.Dropout(dropout)  # torch's masks, from the global generator torch's would use
        kwargs = _block_kwargs(dim, heads, mlp_dim, dropout)
        self.blocks = jnn.ModuleList([jnn.TransformerEncoderLayer(**kwargs) for _ in range(depth)])
        self.ln_f = jnn.LayerNorm(dim)

    def __call__(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(jnp.arange(t)))
        # torch's generate_square_subsequent_mask: -inf above the diagonal, 0 elsewhere.
        mask = jnp.triu(jnp.full((t, t), -jnp.inf, x.dtype), k=1)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return JF.linear(self.ln_f(x), self.tok_emb.weight[...]).transpose(0, 2, 1)
