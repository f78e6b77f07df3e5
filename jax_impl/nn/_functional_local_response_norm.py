"""``torch.nn.functional.local_response_norm``: normalisation across neighbouring channels, in torch's op order.

``torch/nn/functional.py`` computes, for ``(N, C, *)`` input ``x``::

    div = x * x
    # 3-D: (N, 1, C, L), zero-padded by (size // 2, (size - 1) // 2) channels, avg_pool2d((size, 1), stride=1)
    # else: (N, 1, C, H, rest), padded likewise, avg_pool3d((size, 1, 1), stride=1)
    div = div.mul(alpha).add(k).pow(beta)
    return x / div

so ``b_c = a_c / (k + alpha / n * sum_{c'} a_{c'}^2)^beta`` over the ``n = size``
channels ``c - size // 2 .. c + (size - 1) // 2`` (zeros past the ends,
still divided by ``size``). The same ops run here: jax_impl's ``pad`` and
``avg_pool2d``/``avg_pool3d``, the product ``alpha * mean`` kept rounded
before ``+ k`` (XLA would otherwise fuse the two into one multiply-add
inside ``jit``), torch's ``pow`` kernel and derivative, and an IEEE division
by the power (inside ``jit`` XLA would turn ``x / d ** beta`` into
``x * d ** -beta``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_impl.kernels import rounded, runtime_zero_of
from jax_impl.nn import functional as F
from jax_impl.nn._torch_pow import pow_scalar

__all__ = ["local_response_norm"]


def local_response_norm(input: jax.Array, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> jax.Array:
    r"""``torch.nn.functional.local_response_norm``.

    .. math::
        b_c = a_c \left(k + \frac{\alpha}{n} \sum_{c'=\max(0, c - \lfloor n/2 \rfloor)}
        ^{\min(C - 1, c + \lfloor (n - 1)/2 \rfloor)} a_{c'}^2\right)^{-\beta}

    Args:
      input: ``(N, C, *)`` with at least one trailing dimension.
      size: ``n``, the number of neighbouring channels summed.
      alpha: multiplicative factor.
      beta: exponent.
      k: additive factor.

    Raises:
      ValueError: input of fewer than 3 dimensions (torch's message).
      RuntimeError: ``size < 1`` (torch's average pool's message).
    """
    x = jnp.asarray(input)
    dim = x.ndim
    if dim < 3:
        # torch's message, line-continuation spaces included.
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {dim} dimensions)")
    if x.size == 0:
        return x
    if size <= 0:
        window = f"kH: {size} kW: 1" if dim == 3 else f"kT: {size} kH: 1 kW: 1"
        raise RuntimeError(f"kernel size should be greater than zero, but got {window}")
    div = x * x
    if dim == 3:
        div = F.pad(div[:, None], (0, 0, size // 2, (size - 1) // 2))
        div = F.avg_pool2d(div, (size, 1), stride=1)[:, 0]
    else:
        sizes = x.shape
        div = div.reshape(sizes[0], 1, sizes[1], sizes[2], -1)
        div = F.pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = F.avg_pool3d(div, (size, 1, 1), stride=1)[:, 0].reshape(sizes)
    zero = runtime_zero_of(div)
    div = pow_scalar(rounded(div * alpha, zero) + k, beta)
    # Hidden from XLA, which would rewrite x / pow(d, beta) as x * pow(d, -beta) (another rounding).
    return x / rounded(div, zero)
