"""``torch.nn.Upsample``, ``UpsamplingNearest2d`` and ``UpsamplingBilinear2d`` (``torch/nn/modules/upsampling.py``).

State-free: each calls :func:`jax_impl.nn.functional.interpolate` with its constructor arguments, kept under
torch's attribute names (``name``, ``size``, ``scale_factor``, ``mode``, ``align_corners``,
``recompute_scale_factor``).
"""

from __future__ import annotations

from collections.abc import Sequence

from jax_impl.nn import functional as F
from jax_impl.nn.modules.module import Module

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]


class Upsample(Module):
    """``torch.nn.Upsample``: ``F.interpolate(input, size, scale_factor, mode, align_corners,
    recompute_scale_factor=...)`` on ``(N, C, W)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``.

    As torch, a tuple ``scale_factor`` is stored as floats and a scalar one as a float (``None`` when falsy).
    """

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def __call__(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)


class UpsamplingNearest2d(Upsample):
    """``torch.nn.UpsamplingNearest2d``: :class:`Upsample` with ``mode='nearest'``."""

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``torch.nn.UpsamplingBilinear2d``: :class:`Upsample` with ``mode='bilinear'``, ``align_corners=True``."""

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
