"""``torch.nn.PixelShuffle`` and ``PixelUnshuffle`` (``torch/nn/modules/pixelshuffle.py``)."""

from __future__ import annotations

from jax_impl.nn import functional as F
from jax_impl.nn.modules.module import Module

__all__ = ["PixelShuffle", "PixelUnshuffle"]


class PixelShuffle(Module):
    """``(*, C r^2, H, W) -> (*, C, H r, W r)`` (the super-resolution example's upsampling)."""

    def __init__(self, upscale_factor: int) -> None:
        self.upscale_factor = upscale_factor

    def __call__(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)


class PixelUnshuffle(Module):
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``."""

    def __init__(self, downscale_factor: int) -> None:
        self.downscale_factor = downscale_factor

    def __call__(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)
