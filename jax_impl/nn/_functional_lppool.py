"""``torch.nn.functional.lp_pool1d/2d/3d``: power-average pooling, in torch's operation order.

``torch/nn/functional.py`` computes, with ``K`` the product of the kernel sizes,
``p = norm_type``::

    out = avg_pool(x.pow(p), kernel_size, stride, 0, ceil_mode)
    return (sign(out) * relu(abs(out))).mul(K).pow(1 / p)

i.e. ``f(X) = (sum_{x in X} x^p)^(1/p)`` per window, the sum formed as the
window's mean times ``K`` (with ``ceil_mode`` a window cut by the input's end
is divided by its own size, then multiplied by ``K``, as torch). ``p = inf``
is ``max_pool(|x|)`` and ``p = -inf`` is ``-max_pool(-|x|)``. Each step here
is the same op: jax_impl's ``avg_pool``/``max_pool``, ``relu``, torch's
``sign`` (0 at 0 and NaN), ``abs`` with torch's derivative (0 at 0: a
window of zeros passes no gradient, for ``p = inf`` too) and torch's ``pow``
kernel and derivative
(:mod:`jax_impl.nn._torch_pow`), so the gradient is zero where the window's
power sum is zero, as torch documents.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp

from jax_impl.kernels import TorchOps
from jax_impl.nn import functional as F
from jax_impl.nn._torch_pow import pow_scalar

__all__ = ["lp_pool1d", "lp_pool2d", "lp_pool3d"]


@jax.custom_jvp
def _abs(x: jax.Array) -> jax.Array:
    """``torch.abs``: its derivative is ``sign(x)``, 0 at 0 (jax's ``abs`` passes the gradient there)."""
    return jnp.abs(x)


_abs.defjvp(lambda primals, tangents: (_abs(primals[0]), tangents[0] * TorchOps.sign(primals[0])))


def _ntuple(value, n: int) -> tuple:
    # torch's _pair/_triple: an iterable passes through unchanged (its length unchecked), a scalar repeats.
    return tuple(value) if isinstance(value, Iterable) else (value,) * n


def _lp_pool(nd: int, x, norm_type, kernel_size, stride, ceil_mode: bool, window: int):
    avg_pool = getattr(F, f"avg_pool{nd}d")
    max_pool = getattr(F, f"max_pool{nd}d")
    x = jnp.asarray(x)
    if isinstance(norm_type, (int, float)):
        if norm_type == float("inf"):
            return max_pool(_abs(x), kernel_size, stride, 0, 1, ceil_mode)
        if norm_type == -float("inf"):
            return -max_pool(-_abs(x), kernel_size, stride, 0, 1, ceil_mode)
    powered = pow_scalar(x, norm_type)
    if stride is not None:
        out = avg_pool(powered, kernel_size, stride, 0, ceil_mode)
    else:
        out = avg_pool(powered, kernel_size, padding=0, ceil_mode=ceil_mode)
    if not isinstance(window, (int, float)):
        # lp_pool1d multiplies by kernel_size itself, which a sequence cannot be.
        raise TypeError(f"mul(): argument 'other' (position 1) must be Tensor, not {type(window).__name__}")
    summed = (TorchOps.sign(out) * F.relu(_abs(out))) * window
    return pow_scalar(summed, 1.0 / norm_type)


def lp_pool1d(input: jax.Array, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False):
    """``torch.nn.functional.lp_pool1d``: ``(sum_{x in window} x^p)^(1/p)`` over windows of ``kernel_size``.

    Args:
      input: ``(N, C, L)`` or ``(C, L)``.
      norm_type: ``p``; ``inf`` / ``-inf`` pool ``|x|`` by its max / min.
      kernel_size: the window length (an ``int``, as torch's ``.mul(kernel_size)`` needs).
      stride: the window step; ``None`` is ``kernel_size``.
      ceil_mode: ``ceil`` instead of ``floor`` for the output length.
    """
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode, kernel_size)


def lp_pool2d(input: jax.Array, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
    """``torch.nn.functional.lp_pool2d``: ``(sum_{x in window} x^p)^(1/p)`` over ``kH x kW`` windows.

    Args:
      input: ``(N, C, H, W)`` or ``(C, H, W)``.
      norm_type: ``p``; ``inf`` / ``-inf`` pool ``|x|`` by its max / min.
      kernel_size: an ``int`` or ``(kH, kW)``.
      stride: an ``int`` or ``(sH, sW)``; ``None`` is ``kernel_size``.
      ceil_mode: ``ceil`` instead of ``floor`` for the output size.
    """
    kw, kh = _ntuple(kernel_size, 2)
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode, kw * kh)


def lp_pool3d(input: jax.Array, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
    """``torch.nn.functional.lp_pool3d``: ``(sum_{x in window} x^p)^(1/p)`` over ``kD x kH x kW`` windows.

    Args:
      input: ``(N, C, D, H, W)`` or ``(C, D, H, W)``.
      norm_type: ``p``; ``inf`` / ``-inf`` pool ``|x|`` by its max / min.
      kernel_size: an ``int`` or ``(kD, kH, kW)``.
      stride: an ``int`` or ``(sD, sH, sW)``; ``None`` is ``kernel_size``.
      ceil_mode: ``ceil`` instead of ``floor`` for the output size.
    """
    kd, kw, kh = _ntuple(kernel_size, 3)
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode, kd * kw * kh)
