"""``Tensor.pow(exponent)`` for a Python-number exponent, with torch's CPU kernel choice and its derivative.

torch's ``pow_Tensor_Scalar_out`` (``aten/src/ATen/native/Pow.cpp``) and
``pow_tensor_scalar_kernel`` (``aten/src/ATen/native/cpu/PowKernel.cpp``)
do not call ``pow`` for every exponent: on float32 and float64

- ``0`` fills ones, ``1`` copies;
- ``0.5`` is ``sqrt``, ``-0.5`` ``1 / sqrt``, ``-1`` ``1 / x``;
- ``2`` is ``x * x``, ``3`` ``x * x * x``, ``-2`` ``1 / (x * x)``;
- any other exponent is ``pow(x, exponent)``.

Each special case rounds as written, so it is spelled the same way here.
The derivative is torch's ``pow_backward`` (``torch/csrc/autograd/FunctionsManual.cpp``):
zero for the exponent ``0``, otherwise ``grad * (exponent * x.pow(exponent - 1))``
with ``x.pow(exponent - 1)`` taking the same kernel choice, so the backward
rounds as torch's too.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["pow_scalar"]


def _kernel(x: jax.Array, exponent: float) -> jax.Array:
    if exponent == 0:
        return jnp.ones_like(x)
    if exponent == 1:
        return x
    if exponent == 0.5:
        return jnp.sqrt(x)
    if exponent == -0.5:
        # torch's rsqrt kernel divides one by the square root: two roundings.
        return 1 / jnp.sqrt(x)
    if exponent == -1:
        return 1 / x
    if exponent == 2:
        return x * x
    if exponent == 3:
        return x * x * x
    if exponent == -2:
        return 1 / (x * x)
    return lax.pow(x, jnp.asarray(exponent, x.dtype))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _pow(x: jax.Array, exponent: float) -> jax.Array:
    return _kernel(x, exponent)


@_pow.defjvp
def _pow_jvp(exponent: float, primals, tangents):
    (x,), (t,) = primals, tangents
    if exponent == 0:
        return _kernel(x, exponent), jnp.zeros_like(t)
    # `exponent * tensor`: the double exponent becomes a scalar of the tensor's dtype, one rounding.
    slope = exponent * _kernel(x, exponent - 1.0)
    return _kernel(x, exponent), t * slope


def pow_scalar(x: jax.Array, exponent: float) -> jax.Array:
    """``x.pow(exponent)`` as torch's CPU kernel computes it, and torch's gradient.

    Args:
      x: a floating-point array.
      exponent: a Python ``int`` or ``float``.

    Returns:
      ``x ** exponent`` with torch's special cases (see the module docstring).
    """
    return _pow(x, float(exponent))
