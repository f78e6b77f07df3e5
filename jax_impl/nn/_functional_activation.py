"""torch.nn.functional's activations, with torch's values and gradients at the kinks.

Forward formulas follow torch's CPU kernels (``aten/src/ATen/native/cpu/
Activation.cpp``, ``UnaryOpsKernel.cpp``). Where JAX's derivative at a kink
differs from torch's backward kernel, a ``custom_jvp`` supplies torch's:

- ``relu``: ``result <= 0 ? 0 : g`` on the result (0 at 0, g at a NaN input, +0 where
  masked); forward ``clamp_min(x, 0)`` keeps NaN;
- ``hardtanh`` / ``relu6``: ``(x <= min or x >= max) ? 0 : g`` (0 at a NaN input);
- ``leaky_relu``: ``x > 0 ? g : g * slope``;
- ``hardsigmoid``: ``-3 < x < 3 ? g / 6 : 0``;
- ``hardswish``: ``x <= -3 ? 0 : x >= 3 ? g : g * (x / 3 + 0.5)`` (NaN at a NaN input);
- ``logsigmoid``: ``x < 0 ? 1 - z / (1 + z) : z / (1 + z)``, ``z = exp(-|x|)``;
- ``elu`` / ``selu`` / ``celu``: ``x <= 0 ? g * alpha * scale * exp(x * s) : g * scale``, ``exp``
  itself rather than JAX's ``expm1(x) + 1`` (which cancels for large negative ``x``); for ``celu``
  the input scale ``s = 1 / float32(alpha)``, as torch's derivative formula rounds it;
- ``threshold``: ``x <= threshold ? 0 : g`` (g at a NaN input).

Masked gradients are a select, as in torch's kernels: ``+0`` whatever the incoming
gradient's sign, never NaN. At a NaN input torch's vectorised CPU loops and its
scalar loop (the last few elements of a tensor) disagree for hardtanh, relu6 and
hardswish; these follow the vectorised loops, which cover all but that tail.

``inplace=`` is accepted and ignored: JAX arrays are immutable, the result is
returned.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl import amp
from jax_impl.nn._functional_loss import log_softmax, softmax

__all__ = [
    "celu", "elu", "gelu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "log_softmax", "logsigmoid", "mish",
    "prelu", "relu", "relu6", "selu", "sigmoid", "silu", "softmax", "softmin", "softplus", "softshrink", "softsign", "tanh", "tanhshrink",
    "threshold",
]

# torch/csrc/api/include/torch/nn/functional/activation.h, aten Activation.cpp
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _with_torch_grad(forward, derivative=None, zero_where=None):
    """``forward(x)`` with torch's backward kernel as its derivative, via ``custom_jvp``.

    The tangent is ``zero_where(x) ? 0 : derivative(x) * t`` (``t`` itself without ``derivative``):
    a select, as torch's kernels write it, so masked entries are ``+0`` whatever ``t`` holds
    (a product with a 0/1 mask would give ``-0`` for a negative ``t`` and NaN for a NaN one).
    """

    @jax.custom_jvp
    def f(x):
        return forward(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        if zero_where is None:
            return forward(x), derivative(x) * t
        zero, masked = _zero(x), zero_where(x)
        if derivative is None:
            return forward(x), jnp.where(masked, zero, t)
        # Masked on both sides of the product, so that forward mode and its transpose (reverse
        # mode, where the product comes last) both give +0: 0 * a negative derivative is -0.
        return forward(x), jnp.where(masked, zero, derivative(x) * jnp.where(masked, zero, t))

    return f


def _zero(x):
    return jnp.zeros((), x.dtype)


def _one(x):
    return jnp.ones((), x.dtype)


# torch: threshold_backward(grad, result, 0), `result <= 0 ? 0 : g`; result <= 0 exactly where x <= 0.
_relu = _with_torch_grad(lambda x: jnp.where(x <= 0, _zero(x), x), zero_where=lambda x: x <= 0)


def relu(input, inplace: bool = False):
    """``max(x, 0)``, NaN kept; gradient ``result <= 0 ? 0 : g`` as torch's ``threshold_backward(g, result, 0)``."""
    return _relu(jnp.asarray(input))


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """``clamp(x, min_val, max_val)``; gradient 0 at and beyond the bounds (torch's ``hardtanh_backward``)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    x = jnp.asarray(input)
    lo, hi = jnp.asarray(min_val, x.dtype), jnp.asarray(max_val, x.dtype)
    f = _with_torch_grad(
        lambda x: jnp.where(x < lo, lo, jnp.where(x > hi, hi, x)),
        # torch's vectorised kernel: NaN input -> 0 (its scalar tail loop, for the last < 8 or 16
        # elements, passes g instead; the vectorised loop covers all but that tail).
        zero_where=lambda x: ~((x > lo) & (x < hi)),
    )
    return f(x)


def relu6(input, inplace: bool = False):
    """``hardtanh(x, 0, 6)``, as torch implements it."""
    return hardtanh(input, 0.0, 6.0)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """``x > 0 ? x : x * negative_slope``; gradient ``x > 0 ? g : g * negative_slope``."""
    x = jnp.asarray(input)
    slope = jnp.asarray(negative_slope, x.dtype)
    f = _with_torch_grad(lambda x: jnp.where(x > 0, x, x * slope), lambda x: jnp.where(x > 0, _one(x), slope))
    return f(x)


def _elu(x, alpha: float, scale: float, input_scale: float):
    # aten elu kernel: x > 0 ? x * poscoef : expm1(x * negiptcoef) * negcoef, negcoef = alpha * scale.
    negcoef = jnp.asarray(alpha, x.dtype) * jnp.asarray(scale, x.dtype)
    poscoef = jnp.asarray(scale, x.dtype)
    negiptcoef = jnp.asarray(input_scale, x.dtype)
    return jnp.where(x > 0, x * poscoef, jnp.expm1(x * negiptcoef) * negcoef)


def _elu_with_torch_grad(x, alpha: float, scale: float, input_scale: float, grad_input_scale):
    """``_elu`` with torch's ``elu_backward(..., is_result=False)`` as its derivative:
    ``x <= 0 ? g * negiptcoef * negcoef * exp(x * negiptcoef) : g * poscoef``.

    JAX's own derivative of ``expm1`` is ``expm1(x) + 1``, which cancels for large negative
    ``x`` (float32: 2e-4 relative at ``x = -9``); torch's kernel takes ``exp`` itself.
    """
    negiptcoef = jnp.asarray(grad_input_scale, x.dtype)
    negcoef = jnp.asarray(alpha, x.dtype) * jnp.asarray(scale, x.dtype)
    poscoef = jnp.asarray(scale, x.dtype)
    f = _with_torch_grad(lambda x: _elu(x, alpha, scale, input_scale),
                         lambda x: jnp.where(x <= 0, negiptcoef * negcoef * jnp.exp(x * negiptcoef), poscoef))
    return f(x)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """``x > 0 ? x : alpha * (exp(x) - 1)`` (``expm1``); gradient ``x <= 0 ? g * alpha * exp(x) : g``."""
    return _elu_with_torch_grad(jnp.asarray(input), alpha, 1.0, 1.0, 1.0)


def selu(input, inplace: bool = False):
    """``scale * elu(x, alpha)`` with torch's constants (torch's ``elu`` backward too)."""
    return _elu_with_torch_grad(jnp.asarray(input), _SELU_ALPHA, _SELU_SCALE, 1.0, 1.0)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``; torch raises for ``alpha == 0``.

    torch's backward (derivatives.yaml: ``elu_backward(grad, alpha, 1, 1.0/alpha.toFloat(), ...)``)
    uses ``1 / float32(alpha)`` as the input scale even for float64 input, so the gradient is
    ``x <= 0 ? g * s * alpha * exp(x * s) : g`` with that rounded ``s``.
    """
    if alpha == 0:
        raise ValueError("ZeroDivisionError")
    return _elu_with_torch_grad(jnp.asarray(input), alpha, 1.0, 1.0 / alpha, 1.0 / float(np.float32(alpha)))


def gelu(input, approximate: str = "none"):
    """``x * Phi(x)`` (``approximate='none'``, erf) or torch's tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate}")
    x = jnp.asarray(input)
    if approximate == "tanh":
        # aten GeluKernel: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        inner = jnp.asarray(math.sqrt(2 / math.pi), x.dtype) * (x + jnp.asarray(0.044715, x.dtype) * x * x * x)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return x * 0.5 * (1 + jax.scipy.special.erf(x * jnp.asarray(1 / math.sqrt(2), x.dtype)))


def sigmoid(input):
    """``1 / (1 + exp(-x))``."""
    return jax.nn.sigmoid(jnp.asarray(input))


def tanh(input):
    """``tanh(x)``."""
    return jnp.tanh(jnp.asarray(input))


def silu(input, inplace: bool = False):
    """``x * sigmoid(x)``."""
    x = jnp.asarray(input)
    return x * jax.nn.sigmoid(x)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """``x * beta > threshold ? x : log1p(exp(x * beta)) / beta``."""
    x = jnp.asarray(input)
    b = jnp.asarray(beta, x.dtype)
    z = x * b
    safe = jnp.where(z > threshold, _zero(x), z)  # no overflow in the branch torch does not take
    return jnp.where(z > threshold, x, jnp.log1p(jnp.exp(safe)) / b)


def mish(input, inplace: bool = False):
    """``x * tanh(softplus(x))``."""
    x = jnp.asarray(input)
    return x * jnp.tanh(jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0))


def hardsigmoid(input, inplace: bool = False):
    """``relu6(x + 3) / 6``; gradient ``g / 6`` strictly inside ``(-3, 3)``."""
    x = jnp.asarray(input)
    f = _with_torch_grad(
        lambda x: jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6,
        # torch's kernel multiplies by one_sixth = 1.0f / 6.0f, a float32 constant even for float64.
        lambda x: jnp.asarray(np.float32(1) / np.float32(6), x.dtype),
        zero_where=lambda x: ~((x > -3) & (x < 3)),
    )
    return f(x)


def hardswish(input, inplace: bool = False):
    """``x * relu6(x + 3) / 6``; gradient as torch's ``hardswish_backward``: 0 up to -3, 1 from 3 on."""
    x = jnp.asarray(input)
    f = _with_torch_grad(
        lambda x: x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6,
        # torch's vectorised kernel: NaN input -> NaN (g * (x / 3 + 0.5); its scalar tail passes g).
        lambda x: jnp.where(x >= 3, _one(x), x / 3 + 0.5),
        zero_where=lambda x: x <= -3,
    )
    return f(x)


def _logsigmoid_grad(x):
    # aten log_sigmoid_backward: x < 0 ? 1 - z/(1+z) : z/(1+z), z = exp(-|x|) (0.5 at +-0).
    z = jnp.exp(-jnp.abs(x))
    return jnp.where(x < 0, _one(x), _zero(x)) - jnp.where(x < 0, _one(x), -_one(x)) * (z / (1 + z))


_logsigmoid = _with_torch_grad(lambda x: jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x))), _logsigmoid_grad)


def logsigmoid(input):
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))``."""
    return _logsigmoid(jnp.asarray(input))


def softsign(input):
    """``x / (1 + |x|)``."""
    x = jnp.asarray(input)
    return x / (1 + jnp.abs(x))


def hardshrink(input, lambd: float = 0.5):
    """``0`` where ``-lambd <= x <= lambd``, else ``x`` (NaN stays NaN); the gradient is zero on that band."""
    x = jnp.asarray(input)
    return jnp.where((x >= -lambd) & (x <= lambd), jnp.zeros((), x.dtype), x)


def softshrink(input, lambd: float = 0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, ``x * 0`` between (torch's CPU kernel: NaN
    stays NaN); torch refuses a negative ``lambd``."""
    x = jnp.asarray(input)
    top = float(jnp.finfo(x.dtype).max)
    if not 0 <= lambd <= top:
        names = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}
        raise RuntimeError(f"lambda must be in range [0, {top:g}] for input dtype "
                           f"{names.get(x.dtype.name, x.dtype.name)}, but found {lambd:g}")
    return jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, x * 0))


def glu(input, dim: int = -1):
    """``a * sigmoid(b)`` of the two halves of ``dim``."""
    x = jnp.asarray(input)
    if x.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = x.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % x.ndim} is size {size}")
    a, b = jnp.split(x, 2, axis=dim)
    return a * jax.nn.sigmoid(b)


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``torch.nn.functional.softmin``: ``softmax(-input, dim)``."""
    x = jnp.asarray(input)
    if dtype is not None:
        x = x.astype(dtype)
    return softmax(-x, dim)


def tanhshrink(input):
    """``x - tanh(x)``."""
    x = jnp.asarray(input)
    return x - jnp.tanh(x)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``x > threshold ? x : value``; gradient ``x <= threshold ? 0 : g`` (g at a NaN input)."""
    x = jnp.asarray(input)
    t, v = jnp.asarray(threshold, x.dtype), jnp.asarray(value, x.dtype)
    f = _with_torch_grad(lambda x: jnp.where(x > t, x, v), zero_where=lambda x: x <= t)
    return f(x)


def prelu(input, weight):
    """``x > 0 ? x : weight * x``; a ``(C,)`` weight broadcasts over dim 1 (dim 0 of 1-D input).

    On torch's autocast ``lower_precision_fp`` list: bf16 under :func:`jax_impl.amp.autocast`.
    """
    x, w = amp.cast_inputs("prelu", jnp.asarray(input), jnp.asarray(weight))
    if w.size == 1:
        # A one-element weight broadcasts as a scalar: torch keeps the input's shape, also 0-d.
        w = w.reshape(())
    else:
        channels = x.shape[1] if x.ndim >= 2 else x.shape[0]
        if w.size != channels:
            raise ValueError(
                f"Mismatch of parameter numbers and input channel size. Found parameter numbers = {w.size} "
                f"and channel size = {channels}."
            )
        w = w.reshape((-1,) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else w
    return jnp.where(x > 0, x, w * x)
