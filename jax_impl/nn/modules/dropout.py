"""``torch.nn.Dropout`` and ``Dropout1d/2d/3d`` as ``flax.nnx`` modules.

In training mode each call is ``y = x * mask / (1 - p)`` with
``mask ~ Bernoulli(1 - p)`` per element (per channel for ``Dropout1d/2d/3d``);
in eval mode, or with ``p == 0``, the input passes through; ``p == 1`` gives
``x * 0``. The mask's stream:

- ``rngs=None`` (the default): torch's. The mask is drawn from the global
  generator ``jax_impl.random.default_generator`` exactly as torch's CPU
  ``bernoulli_`` draws it (see :func:`jax_impl.nn.functional.dropout`), at
  each call, also inside ``jax.jit`` / ``nnx.jit`` (an ordered host callback).
  Construction draws nothing, as torch's ``nn.Dropout`` does, so layers built
  after it get torch's initial weights.
- ``rngs=nnx.Rngs(...)``: jax keys from its ``'dropout'`` stream (else
  ``'default'``), as ``flax.nnx.Dropout``; not torch's numbers.
"""

from __future__ import annotations

import numpy as np
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn.modules.module import Module

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"]


class _DropoutNd(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False, *, rngs: nnx.Rngs | None = None) -> None:
        """Args: ``p`` the drop probability (``ValueError`` outside ``[0, 1]``), ``inplace`` accepted
        and ignored, ``rngs`` ``None`` for torch's stream or an ``nnx.Rngs`` for jax keys."""
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace
        self.rngs = rngs

    def __call__(self, input, *, mask_order: tuple[int, ...] | None = None):
        """Dropout of ``input``.

        ``mask_order`` (not in torch) draws the mask for ``input.transpose(mask_order)``
        and returns the result in ``input``'s layout: torch fills a mask in
        its tensor's memory order, so a dropout applied to a transposed view
        in torch (the attention output of a batch-first transformer layer)
        draws its numbers in the transposed order.
        """
        # A key is taken only when a mask is drawn, so eval calls leave the 'dropout' stream alone.
        draws = self.training and 0 < self.p < 1
        rng = self.rngs.dropout() if draws and self.rngs is not None else None
        if mask_order is None:
            return type(self)._fn(input, self.p, self.training, self.inplace, rng=rng)
        out = type(self)._fn(input.transpose(mask_order), self.p, self.training, self.inplace, rng=rng)
        return out.transpose(tuple(int(i) for i in np.argsort(mask_order)))


class Dropout(_DropoutNd):
    """``torch.nn.Dropout(p=0.5, inplace=False)``: zero elements with probability ``p``, scale the rest by ``1 / (1 - p)``."""

    _fn = staticmethod(F.dropout)


class Dropout1d(_DropoutNd):
    """``torch.nn.Dropout1d``: zero whole channels of ``(N, C, L)`` / ``(C, L)``."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """``torch.nn.Dropout2d``: zero whole channels of ``(N, C, H, W)`` (a 3-D input is ``(N, C, L)``, as torch)."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """``torch.nn.Dropout3d``: zero whole channels of ``(N, C, D, H, W)`` / ``(C, D, H, W)``."""

    _fn = staticmethod(F.dropout3d)
