"""``torch.nn.Dropout`` and ``Dropout1d/2d/3d`` as ``flax.nnx`` modules.

In training mode each call draws a fresh mask from the module's ``rngs``
stream ``'dropout'`` (as ``flax.nnx.Dropout`` does); in eval mode the input
passes through. Kept elements are scaled by ``1 / float(1 - p)`` rounded as
torch's CPU kernel rounds it. The masks' random numbers are not torch's
(torch draws them with MKL's Bernoulli generator).
"""

from __future__ import annotations

from flax import nnx

from jax_impl.nn import _functional_activation as F
from jax_impl.nn.modules.module import Module
from jax_impl.random import default_generator

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"]


def _default_rngs() -> nnx.Rngs:
    # Reproducible from jax_impl.random.manual_seed: one random64() draw of the global generator.
    return nnx.Rngs(dropout=int(default_generator.random_u64(1)[0]) & (2**63 - 1))


class _DropoutNd(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False, *, rngs: nnx.Rngs | None = None) -> None:
        """Args: ``p`` the drop probability, ``inplace`` ignored, ``rngs`` with a ``'dropout'`` (or
        ``'default'``) stream; ``None`` seeds one from the global generator (``jax_impl.random.manual_seed``)."""
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace
        self.rngs = _default_rngs() if rngs is None else rngs

    def __call__(self, input):
        if not self.training or self.p == 0 or self.p == 1:
            return type(self)._fn(input, self.p, self.training)
        return type(self)._fn(input, self.p, True, rng=self.rngs.dropout())


class Dropout(_DropoutNd):
    """``torch.nn.Dropout(p=0.5, inplace=False)``: zero elements with probability ``p``, scale the rest."""

    _fn = staticmethod(F.dropout)


class Dropout1d(_DropoutNd):
    """``torch.nn.Dropout1d``: zero whole channels of ``(N, C, L)`` / ``(C, L)``."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """``torch.nn.Dropout2d``: zero whole channels of ``(N, C, H, W)`` / ``(C, H, W)``."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """``torch.nn.Dropout3d``: zero whole channels of ``(N, C, D, H, W)`` / ``(C, D, H, W)``."""

    _fn = staticmethod(F.dropout3d)
