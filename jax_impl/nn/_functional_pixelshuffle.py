"""``torch.nn.functional.pixel_shuffle`` / ``pixel_unshuffle``: channels to space and back, exact (no arithmetic)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["pixel_shuffle", "pixel_unshuffle"]


def pixel_shuffle(input: jax.Array, upscale_factor: int) -> jax.Array:
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``: output ``[c, h r + i, w r + j] = input[c r^2 + i r + j, h, w]``."""
    x = jnp.asarray(input)
    r = int(upscale_factor)
    if x.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {x.ndim} "
                           "dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *batch, c, h, w = x.shape
    if c % (r * r):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(batch)
    x = x.reshape(*batch, c // (r * r), r, r, h, w)
    x = jnp.transpose(x, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: jax.Array, downscale_factor: int) -> jax.Array:
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``, the inverse of :func:`pixel_shuffle`."""
    x = jnp.asarray(input)
    r = int(downscale_factor)
    if x.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{x.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *batch, c, h, w = x.shape
    if h % r:
        raise RuntimeError("pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)="
                           f"{h} is not divisible by {r}")
    if w % r:
        raise RuntimeError("pixel_unshuffle expects width to be divisible by downscale_factor, but input.size(-1)="
                           f"{w} is not divisible by {r}")
    n = len(batch)
    x = x.reshape(*batch, c, h // r, r, w // r, r)
    x = jnp.transpose(x, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(*batch, c * r * r, h // r, w // r)
