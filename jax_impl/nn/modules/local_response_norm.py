"""``torch.nn.LocalResponseNorm`` (``torch/nn/modules/normalization.py``) as a ``flax.nnx`` module."""

from __future__ import annotations

from jax_impl.nn import functional as F
from jax_impl.nn.modules.module import Module

__all__ = ["LocalResponseNorm"]


class LocalResponseNorm(Module):
    r"""``torch.nn.LocalResponseNorm(size, alpha=1e-4, beta=0.75, k=1.0)``: normalisation across channels.

    .. math::
        b_{c} = a_{c}\left(k + \frac{\alpha}{n}
        \sum_{c'=\max(0, c-n/2)}^{\min(N-1,c+n/2)}a_{c'}^2\right)^{-\beta}

    with ``n = size``, over input ``(N, C, *)``, computed in torch's operation order
    (:func:`jax_impl.nn.functional.local_response_norm`). No parameters.
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def __call__(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)
