"""torch.nn.functional's margin and embedding losses on jax arrays.

``cosine_embedding_loss``, ``hinge_embedding_loss``, ``margin_ranking_loss``,
``multilabel_margin_loss``, ``multilabel_soft_margin_loss``,
``multi_margin_loss`` and ``soft_margin_loss`` with torch's names, argument
names, defaults, shape rules and error messages, reproducing the operation
order of torch 2.13's CPU code:

- ``aten/src/ATen/native/Loss.cpp``: ``cosine_embedding_loss``,
  ``hinge_embedding_loss`` and ``margin_ranking_loss`` are composites of
  elementwise ops differentiated by autograd (so is
  ``multilabel_soft_margin_loss``, in ``torch/nn/functional.py``);
  ``soft_margin_loss`` is ``log1p(exp(-x * y))`` with a hand-written backward.
- ``LossMultiMargin.cpp`` / ``LossMultiLabelMargin.cpp``: serial CPU loops
  with hand-written backward kernels, reproduced here with ``jax.custom_vjp``.

Three torch conventions are reproduced where jax's defaults differ:
``clamp_min``'s gradient passes where the input equals the bound (jax's
``maximum`` splits it in half); a division by an element count is correctly
rounded (XLA:CPU multiplies by the reciprocal); and torch's serial loops
accumulate in their own order (a class-by-class ``lax.scan`` here) and, for
float32, in a double accumulator (compensated float32 sums here, which round
to the same float in all but near-tie cases; a ``'mean'``/``'sum'`` then
divides that float, where torch divides the double: at most 1 ULP apart).

Not reproduced: torch's ``multi_margin_loss`` / ``multilabel_margin_loss``
leave the scalar of a ``'mean'``/``'sum'`` over an empty batch uninitialised
(here: NaN for ``'mean'``, 0 for ``'sum'``); their target range checks run
only outside ``jit``; a ``weight`` of another float dtype than the input is
cast (torch raises).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl import amp
from jax_impl.kernels import div_scalar, rounded, runtime_zero_of
from jax_impl.nn._functional_activation import logsigmoid
from jax_impl.nn._functional_loss import legacy_get_string
# torch's CPU mean (a correctly rounded division by the count) and apply_loss_reduction, shared with the other losses
from jax_impl.nn._loss_ops import divide_by_count as _div_count
from jax_impl.nn._loss_ops import reduce as _reduce

Array = jax.Array

__all__ = [
    "cosine_embedding_loss",
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "soft_margin_loss",
]

# Loss.cpp: ``constexpr float EPSILON = 1e-12``, a float even for float64 inputs.
_EPSILON = float(np.float32(1e-12))

_TORCH_DTYPE = {
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double", "bool": "Bool",
    "int8": "Char", "uint8": "Byte", "int16": "Short", "int32": "Int", "int64": "Long",
}

# The multilabel backward's table of repeated additions (see ``_repeated_sums``) has ``C * C + 1``
# entries up to this many classes; above it, a class index repeated in one target row beyond what
# the table covers falls back to ``count * g``.
_TABLE_CLASSES = 1024


# ----------------------------------------------------------------------------- shared helpers


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """``_Reduction.legacy_get_enum`` / ``get_enum`` as torch/nn/functional.py calls them."""
    if size_average is not None or reduce is not None:
        return legacy_get_string(size_average, reduce)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use reduction='mean' instead.", stacklevel=3)
        return "mean"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _sizes(shape: tuple[int, ...]) -> str:
    """``IntArrayRef`` as ATen prints it: ``[3, 4]``."""
    return f"[{', '.join(str(s) for s in shape)}]"


def _torch_size(shape: tuple[int, ...]) -> str:
    return f"torch.Size({_sizes(shape)})"


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """``at::infer_size`` with its message (the last mismatching dimension is the one named)."""
    ndim = max(len(a), len(b))
    out = []
    for i in range(ndim - 1, -1, -1):
        offset = ndim - 1 - i
        size_a = a[len(a) - 1 - offset] if offset < len(a) else 1
        size_b = b[len(b) - 1 - offset] if offset < len(b) else 1
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise RuntimeError(
                f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
                f"at non-singleton dimension {i}"
            )
        out.append(size_a if size_b == 1 else size_b)
    return tuple(reversed(out))


def _floating(*arrays: Array) -> jnp.dtype:
    """torch's result type of ``arrays``, float32 when none is floating."""
    dtype = jnp.result_type(*arrays)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.dtype(jnp.float32)


def _scalar(value: float, dtype) -> Array:
    """A Python number as torch's CPU kernels see it: ``scalar_t(value)``."""
    return jnp.asarray(np.asarray(value, dtype=np.float64).astype(dtype))


@jax.custom_jvp
def _clamp_min_zero(x: Array) -> Array:
    """``x.clamp_min(0)``, whose gradient is ``grad * (x >= 0)`` (derivatives.yaml): it passes at the tie."""
    return jnp.maximum(x, jnp.zeros((), x.dtype))


_clamp_min_zero.defjvp(
    lambda primals, tangents: (
        _clamp_min_zero(primals[0]),
        jnp.where(primals[0] >= 0, tangents[0], jnp.zeros((), tangents[0].dtype)),
    )
)


def _two_sum(a: Array, b: Array) -> tuple[Array, Array]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and the exact error ``a + b - s``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _accurate_sum(values: Array, axis: int) -> tuple[Array, Array]:
    """``sum(values, axis)`` as an unevaluated pair ``hi + lo`` with about twice the working precision.

    Pairwise TwoSum (errors summed in working precision): for float32 this
    stands in for torch's ``accscalar_t`` (double) accumulator, whose float
    result is ``fl(hi + lo)`` unless the sum lies within ~1e-14 of a rounding
    tie.
    """
    values = jnp.moveaxis(values, axis, -1)
    n = values.shape[-1]
    if n == 0:
        zeros = jnp.zeros(values.shape[:-1], values.dtype)
        return zeros, zeros
    width = 1 << (n - 1).bit_length()
    hi = jnp.pad(values, [(0, 0)] * (values.ndim - 1) + [(0, width - n)])
    lo = jnp.zeros_like(hi)
    while width > 1:
        width //= 2
        s, e = _two_sum(hi[..., :width], hi[..., width:])
        lo = (lo[..., :width] + lo[..., width:]) + e
        hi = s
    return hi[..., 0], lo[..., 0]


def _integer_target(target: Array) -> Array:
    """The kernels' ``target.data_ptr<int64_t>()`` check (any integer dtype is accepted here)."""
    if not jnp.issubdtype(target.dtype, jnp.integer):
        name = _TORCH_DTYPE.get(target.dtype.name, target.dtype.name)
        raise RuntimeError(f"expected scalar type Long but found {name}")
    return target.astype(jnp.int32)


def _dispatch_floating(x: Array, kernel: str) -> Array:
    """``AT_DISPATCH_FLOATING_TYPES``: float32 and float64 only, as torch (integer input computes in float32)."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x.astype(jnp.float32)
    if x.dtype not in (jnp.float32, jnp.float64):
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_TORCH_DTYPE.get(x.dtype.name, x.dtype.name)}\'')
    return x


def _matrix_shape(x: Array) -> tuple[int, int]:
    """``(nframe, dim)`` of LossMulti.h's shape checks: ``()`` is ``(1, 1)``, ``(C,)`` is ``(1, C)``."""
    if not ((x.ndim == 2 and x.shape[1] != 0) or (x.ndim == 1 and x.shape[0] != 0) or x.ndim == 0):
        raise RuntimeError(
            f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {_sizes(x.shape)}"
        )
    if x.ndim <= 1:
        return 1, 1 if x.ndim == 0 else x.shape[0]
    return x.shape[0], x.shape[1]


def _is_concrete(x: Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


# ----------------------------------------------------------------------------- elementwise losses


@amp.autocast_op("cosine_embedding_loss")
def cosine_embedding_loss(
    input1: Array,
    input2: Array,
    target: Array,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Cosine embedding loss, Loss.cpp's composite.

    ``cos = sum(x1 x2) / sqrt((sum(x1^2) + eps) (sum(x2^2) + eps))`` along the
    feature axis (``eps`` = float32 ``1e-12``); the loss is ``1 - cos`` where
    ``y == 1``, ``max(cos - margin, 0)`` where ``y == -1``, 0 elsewhere.
    Gradients are autograd's of that expression (``clamp_min``'s passes at
    ``cos == margin``); ``target`` gets none.

    Args:
        input1: ``(N, D)``, or ``(D,)`` with a 0-d ``target``.
        input2: Same shape as ``input1`` (broadcastable).
        target: ``(N,)`` or ``()``, values ``1`` / ``-1``.
        margin: Subtracted from ``cos`` for ``y == -1``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, ``(N,)`` for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x1, x2, t = jnp.asarray(input1), jnp.asarray(input2), jnp.asarray(target)
    if t.ndim not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    need = 2 if t.ndim == 1 else 1
    if x1.ndim != need or x2.ndim != need:
        raise RuntimeError(
            f"{t.ndim}D target tensor expects {need}D input tensors, but found inputs with sizes "
            f"{_sizes(x1.shape)} and {_sizes(x2.shape)}."
        )
    _broadcast_shape(x1.shape, x2.shape)
    dtype = _floating(x1, x2)
    x1, x2 = x1.astype(dtype), x2.astype(dtype)
    axis = t.ndim
    zero = runtime_zero_of(x1)
    # Each product is its own tensor in torch: rounded before the sum, never contracted into it.
    prod_sum = jnp.sum(rounded(x1 * x2, zero), axis=axis)
    eps = _scalar(_EPSILON, dtype)
    mag_square1 = jnp.sum(rounded(x1 * x1, zero), axis=axis) + eps
    mag_square2 = jnp.sum(rounded(x2 * x2, zero), axis=axis) + eps
    cos = prod_sum / jnp.sqrt(mag_square1 * mag_square2)
    _broadcast_shape(t.shape, cos.shape)
    zeros = jnp.zeros((), dtype)
    pos = _scalar(1, dtype) - cos
    neg = _clamp_min_zero(cos - _scalar(margin, dtype))
    output = jnp.where(t == 1, pos, zeros) + jnp.where(t == -1, neg, zeros)
    return _reduce(output, reduction)


@amp.autocast_op("hinge_embedding_loss")
def hinge_embedding_loss(
    input: Array,
    target: Array,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Hinge embedding loss, Loss.cpp's composite.

    ``where(y != 1, max(margin - x, 0), 0) + where(y != -1, x, 0)``: ``x``
    for ``y == 1``, ``max(margin - x, 0)`` for ``y == -1``, their sum for any
    other value. ``clamp_min``'s gradient passes at ``x == margin``.

    Args:
        input: Any shape.
        target: Broadcastable against ``input``.
        margin: The hinge.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, of the broadcast shape for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, t = jnp.asarray(input), jnp.asarray(target)
    _broadcast_shape(t.shape, x.shape)  # ``where(target != 1, ...)``: target is tensor a
    x = x.astype(_floating(x))
    zeros = jnp.zeros((), x.dtype)
    margin_clamp = _clamp_min_zero(_scalar(margin, x.dtype) - x)
    output = jnp.where(t != 1, margin_clamp, zeros) + jnp.where(t != -1, x, zeros)
    return _reduce(output, reduction)


@amp.autocast_op("margin_ranking_loss")
def margin_ranking_loss(
    input1: Array,
    input2: Array,
    target: Array,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Margin ranking loss ``max(-y (x1 - x2) + margin, 0)``, Loss.cpp's composite.

    Each op rounds on its own (``-y * (x1 - x2)`` is not fused with the
    ``+ margin``); ``target`` is differentiated too, as in torch, and
    ``clamp_min``'s gradient passes at the tie.

    Args:
        input1: Any shape.
        input2: Same number of dimensions as ``input1`` (broadcastable).
        target: Same number of dimensions, values ``1`` / ``-1``.
        margin: Added before the clamp.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, of the broadcast shape for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x1, x2, t = jnp.asarray(input1), jnp.asarray(input2), jnp.asarray(target)
    if x1.ndim != x2.ndim or x1.ndim != t.ndim:
        raise RuntimeError(
            "margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {_torch_size(x1.shape)}, input2: {_torch_size(x2.shape)}, target: {_torch_size(t.shape)} "
        )
    _broadcast_shape(t.shape, _broadcast_shape(x1.shape, x2.shape))
    dtype = _floating(x1, x2, t)
    x1, x2, t = x1.astype(dtype), x2.astype(dtype), t.astype(dtype)
    product = rounded(-t * (x1 - x2), runtime_zero_of(x1))
    return _reduce(_clamp_min_zero(product + _scalar(margin, dtype)), reduction)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _soft_margin(x: Array, t: Array, reduction: str) -> Array:
    # Loss.cpp soft_margin_loss_out: neg(x).mul_(y).exp_().log1p_()
    return _reduce(jnp.log1p(jnp.exp(-x * t)), reduction)


def _soft_margin_bwd(reduction: str, res, g: Array):
    """Loss.cpp soft_margin_loss_backward: ``((y * z) * -norm) / (z + 1) * g``, ``z = exp(-y x)``."""
    x, t = res
    norm = 1.0 / x.size if reduction == "mean" else 1.0
    z = jnp.exp(-t * x)
    zero = runtime_zero_of(x)
    grad = rounded(rounded(t * z, zero) * _scalar(-norm, x.dtype), zero) / (z + _scalar(1, x.dtype))
    # torch refuses to differentiate ``target``.
    return rounded(grad, zero) * g, None


_soft_margin.defvjp(lambda x, t, reduction: (_soft_margin(x, t, reduction), (x, t)), _soft_margin_bwd)


@amp.autocast_op("soft_margin_loss")
def soft_margin_loss(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Soft margin loss ``log1p(exp(-y x))`` (Loss.cpp).

    Backward is torch's kernel ``-norm * y * z / (1 + z) * g`` with
    ``z = exp(-y x)`` and ``norm = 1 / numel`` for ``'mean'``: NaN where
    ``z`` overflows, as in torch. ``target`` gets no gradient (torch refuses
    to differentiate it).

    Args:
        input: Any shape.
        target: Broadcastable to ``input``'s shape (not beyond it).
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, of ``input``'s shape for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, t = jnp.asarray(input), jnp.asarray(target)
    shape = _broadcast_shape(x.shape, t.shape)
    if shape != x.shape:
        # The in-place ``mul_(target)`` on an output of ``input``'s shape.
        raise RuntimeError(f"output with shape {_sizes(x.shape)} doesn't match the broadcast shape {_sizes(shape)}")
    x = x.astype(_floating(x))
    return _soft_margin(x, jnp.broadcast_to(t.astype(x.dtype), x.shape), reduction)


def multilabel_soft_margin_loss(
    input: Array,
    target: Array,
    weight: Array | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Multilabel soft margin loss, torch/nn/functional.py's composite.

    ``l = -(y logsigmoid(x) + (1 - y) logsigmoid(-x)) * w``, summed over the
    last (class) axis and divided by its size ``C``; ``'mean'`` averages those
    per-sample values. Differentiable in ``input``, ``target`` and
    ``weight``, as torch's autograd.

    Args:
        input: ``(N, C)``, ``(C,)`` or any ``(..., C)``.
        target: Broadcastable against ``input``.
        weight: Optional weight broadcastable against the elementwise loss.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'`` (checked after the
            computation, with torch's ``"<reduction> is not valid"``).

    Returns:
        The loss, ``input.shape[:-1]`` for ``'none'``, else a scalar.
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_get_string(size_average, reduce)
    x, t = jnp.asarray(input), jnp.asarray(target)
    shape = _broadcast_shape(t.shape, x.shape)
    dtype = _floating(x, t)
    x, t = x.astype(dtype), t.astype(dtype)
    zero = runtime_zero_of(x)
    one = _scalar(1, dtype)
    loss = -(rounded(t * logsigmoid(x), zero) + rounded((one - t) * logsigmoid(-x), zero))
    if weight is not None:
        w = jnp.asarray(weight)
        _broadcast_shape(shape, w.shape)
        loss = rounded(loss * w.astype(jnp.result_type(loss, w)), zero)
    if x.ndim == 0:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    loss = _div_count(jnp.sum(loss, axis=-1), x.shape[-1])
    if reduction == "none":
        return loss
    if reduction == "mean":
        return _reduce(loss, "mean")
    if reduction == "sum":
        return jnp.sum(loss)
    raise ValueError(reduction + " is not valid")


# ----------------------------------------------------------------------------- multi_margin_loss


def _multi_margin_rows(x: Array, target: Array, weight: Array | None, p: int, margin: float, g=None):
    """LossMultiMargin.cpp's per-row loop over classes ``d`` as a ``lax.scan``.

    Forward (``g is None``): ``sum_d h_d`` accumulated in class order, with
    ``z = (margin - x[y]) + x[d]``, ``h = z`` (or ``z * z``) ``* w[y]`` where
    ``d != y`` and ``z > 0``. Backward (``g`` = ``1/dim`` or
    ``1/(nframe*dim)``): the per-class ``h = g`` (or ``2 g z``) ``* w[y]`` and
    the target's ``-sum h`` in the same order.
    """
    dtype = x.dtype
    zero = runtime_zero_of(x)
    m = _scalar(margin, dtype)
    x_target = jnp.take_along_axis(x, target[:, None], axis=1)[:, 0]
    w = None if weight is None else weight[target]
    zeros = jnp.zeros(x.shape[0], dtype)
    classes = jnp.arange(x.shape[1], dtype=jnp.int32)

    def step(acc, column):
        x_d, d = column
        z = (m - x_target) + x_d
        active = (z > 0) & (d != target)
        if g is None:
            h = z if p == 1 else rounded(z * z, zero)
        else:
            h = jnp.broadcast_to(g, z.shape) if p == 1 else rounded(rounded(2 * g, zero) * z, zero)
        if w is not None:
            h = rounded(h * w, zero)
        h = jnp.where(active, h, zeros)
        return (acc + h if g is None else acc - h), h

    acc, per_class = lax.scan(step, zeros, (x.T, classes))
    return acc, per_class.T


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _multi_margin(x: Array, target: Array, weight: Array | None, p: int, margin: float, reduction: str, keep: bool):
    nframe, dim = x.shape
    sums, _ = _multi_margin_rows(x, target, weight, p, margin)
    per_row = div_scalar(sums, lax.optimization_barrier(_scalar(dim, x.dtype)))  # ``sum /= dim`` in scalar_t
    if reduction == "none":
        return per_row if keep else per_row[0]
    # accscalar_t (double) over frames, then ``sum /= nframe`` in double.
    hi, lo = _accurate_sum(per_row, 0)
    total = hi + lo
    return total if reduction == "sum" else _div_count(total, nframe)


def _multi_margin_bwd(p, margin, reduction, keep, res, grad_output):
    x, target, weight = res
    nframe, dim = x.shape
    g = _scalar(1.0 / (nframe * dim) if reduction == "mean" else 1.0 / dim, x.dtype)
    target_grad, grad = _multi_margin_rows(x, target, weight, p, margin, g)
    grad = jnp.where(jnp.arange(dim)[None, :] == target[:, None], target_grad[:, None], grad)
    scale = grad_output[:, None] if grad_output.ndim == 1 else grad_output
    # torch refuses to differentiate ``weight``; ``target`` is integer.
    return grad * scale, None, None


_multi_margin.defvjp(
    lambda x, target, weight, p, margin, reduction, keep: (
        _multi_margin(x, target, weight, p, margin, reduction, keep),
        (x, target, weight),
    ),
    _multi_margin_bwd,
)
# Compiled once per configuration, so that eager calls do not dispatch the scan op by op.
_multi_margin_jit = jax.jit(_multi_margin, static_argnums=(3, 4, 5, 6))


@amp.autocast_op("multi_margin_loss")
def multi_margin_loss(
    input: Array,
    target: Array,
    p: int = 1,
    margin: float = 1.0,
    weight: Array | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Multi-class hinge loss (LossMultiMargin.cpp).

    Per sample ``i`` with class ``y``:
    ``loss_i = sum_{d != y, z_d > 0} w[y] z_d^p / C`` with
    ``z_d = margin - x[y] + x[d]``, accumulated class by class in the
    input's dtype; ``'mean'``/``'sum'`` accumulate the ``loss_i`` in double
    (float32: a compensated sum). Backward is torch's kernel: ``g w[y]``
    (``p = 1``) or ``2 g z_d w[y]`` (``p = 2``) at each violating ``d``,
    minus their running sum at ``y``, ``g = 1 / C`` (``1 / (N C)`` for
    ``'mean'``); 0 at ``z_d == 0``. ``weight`` gets no gradient (torch
    refuses to differentiate it).

    Args:
        input: ``(N, C)``, ``(C,)`` or ``()``.
        target: Integer class indices ``(N,)``; ``()`` or ``(1,)`` for unbatched input.
        p: 1 or 2.
        margin: The margin.
        weight: Optional per-class weight ``(C,)``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        ``(N,)`` for ``'none'`` with a 1-D target, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None:
        weight = jnp.asarray(weight)
        if weight.ndim != 1:
            raise ValueError("weight must be one-dimensional")
    x, t = jnp.asarray(input), jnp.asarray(target)
    nframe, dim = _matrix_shape(x)
    if not (t.ndim <= 1 and t.size == nframe):
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples "
            f"(batch size). Expected target size [{nframe}], but got {_sizes(t.shape)}. Input has shape "
            f"{_sizes(x.shape)}."
        )
    if weight is not None and weight.size != dim:
        raise RuntimeError(f"inconsistent weight size, expected {dim} but got {_sizes(weight.shape)}")
    x = _dispatch_floating(x, "multi_margin_loss_cpu_kernel")
    t = _integer_target(t).reshape(nframe)
    if weight is not None:
        weight = weight.astype(x.dtype)
    keep = jnp.ndim(target) > 0
    if nframe == 0:
        return _reduce(jnp.zeros((0,), x.dtype), reduction)
    if _is_concrete(t) and np.any((np.asarray(t) < 0) | (np.asarray(t) >= dim)):
        raise RuntimeError("target out of range")
    return _multi_margin_jit(x.reshape(nframe, dim), t, weight, p, float(margin), reduction, keep)


# ----------------------------------------------------------------------------- multilabel_margin_loss


def _multilabel_terms(x: Array, target: Array) -> tuple[Array, Array, Array]:
    """LossMultiLabelMargin.cpp's loop as arrays over ``(N, j, d)``.

    ``valid[n, j]``: ``target[n, j]`` lies before the first negative entry;
    ``is_target[n, d]``: ``d`` is a valid target; ``z[n, j, d] =
    (1 - x[n, target[n, j]]) + x[n, d]`` where ``(j, d)`` is counted
    (valid ``j``, non-target ``d``, ``z > 0``), else 0; and that mask.
    """
    dim = x.shape[1]
    valid = jnp.cumprod(target >= 0, axis=1).astype(bool)
    safe = jnp.where(valid, target, 0)
    is_target = jnp.any(valid[:, :, None] & (safe[:, :, None] == jnp.arange(dim)[None, None, :]), axis=1)
    x_target = jnp.take_along_axis(x, safe, axis=1)
    z = (_scalar(1, x.dtype) - x_target)[:, :, None] + x[:, None, :]
    counted = valid[:, :, None] & ~is_target[:, None, :] & (z > 0)
    return jnp.where(counted, z, jnp.zeros((), x.dtype)), counted, safe


def _repeated_sums(g: float, length: int, dtype) -> np.ndarray:
    """``T[m]``: ``g`` added ``m`` times in ``dtype``, one rounding per addition (torch's ``+= g`` loop)."""
    return np.concatenate([np.zeros(1, dtype), np.add.accumulate(np.full(length, g, dtype=dtype))])


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _multilabel_margin(x: Array, target: Array, reduction: str, keep: bool) -> Array:
    nframe, dim = x.shape
    z, _, _ = _multilabel_terms(x, target)
    # Per sample: accscalar_t (double) over (j, d), returned as scalar_t.
    hi, lo = _accurate_sum(z.reshape(nframe, dim * dim), 1)
    per_row = hi + lo
    if reduction == "none":
        per_row = div_scalar(per_row, lax.optimization_barrier(_scalar(dim, x.dtype)))
        return per_row if keep else per_row[0]
    # accscalar_t over frames, then ``sum /= dim`` (and ``/= nframe``) in double: one division of the
    # float sum by ``dim`` (``dim * nframe``) rounds like that double chain but for near-ties.
    hi, lo = _accurate_sum(per_row, 0)
    return _div_count(hi + lo, dim if reduction == "sum" else dim * nframe)


def _multilabel_margin_bwd(reduction, keep, res, grad_output):
    """LossMultiLabelMargin.cpp's backward: ``-= g`` at the target, ``+= g`` at ``d`` per counted ``(j, d)``.

    Every update of one element adds the same ``g``, so its value after
    ``m`` updates is ``T[m]`` of :func:`_repeated_sums`.
    """
    x, target = res
    nframe, dim = x.shape
    dtype = np.dtype(x.dtype)
    g = float(np.asarray(1.0 / (nframe * dim) if reduction == "mean" else 1.0 / dim).astype(dtype))
    _, counted, safe = _multilabel_terms(x, target)
    plus = jnp.sum(counted, axis=1)  # per non-target d
    per_j = jnp.sum(counted, axis=2)  # per (n, j), subtracted at target[n, j]
    minus = jnp.sum(jnp.where(safe[:, :, None] == jnp.arange(dim)[None, None, :], per_j[:, :, None], 0), axis=1)
    count = plus + minus
    length = dim * dim if dim <= _TABLE_CLASSES else dim
    table = jnp.asarray(_repeated_sums(g, length, dtype))
    magnitude = jnp.where(count <= length, table[jnp.minimum(count, length)], count.astype(dtype) * _scalar(g, dtype))
    grad = jnp.where(minus > 0, -magnitude, magnitude)
    scale = grad_output[:, None] if grad_output.ndim == 1 else grad_output
    return grad * scale, None


_multilabel_margin.defvjp(
    lambda x, target, reduction, keep: (_multilabel_margin(x, target, reduction, keep), (x, target)),
    _multilabel_margin_bwd,
)
_multilabel_margin_jit = jax.jit(_multilabel_margin, static_argnums=(2, 3))


@amp.autocast_op("multilabel_margin_loss")
def multilabel_margin_loss(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Multilabel hinge loss (LossMultiLabelMargin.cpp).

    Each row of ``target`` lists class indices, ended by the first ``-1``
    (what follows is ignored). With ``J`` those targets and ``D`` the other
    classes: ``loss_i = sum_{j in J} sum_{d in D} max(0, 1 - x[j] + x[d]) / C``
    (a class listed twice counts twice). Sums accumulate in double in torch
    (a compensated sum for float32 here). Backward is torch's kernel:
    ``+g`` at ``d`` and ``-g`` at ``j`` per positive term, added one at a time
    in the input's dtype, ``g = 1 / C`` (``1 / (N C)`` for ``'mean'``);
    0 at ``z == 0``. Memory is ``O(N C^2)`` (all ``(j, d)`` pairs at once).

    Args:
        input: ``(N, C)``, ``(C,)`` or ``()``.
        target: Integer ``(N, C)`` (``(C,)`` for unbatched input), values in ``[-1, C)``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        ``(N,)`` for ``'none'`` with 2-D input, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, t = jnp.asarray(input), jnp.asarray(target)
    nframe, dim = _matrix_shape(x)
    if x.ndim <= 1:
        ok = t.ndim <= 1 and t.size == dim
    else:
        ok = t.ndim == 2 and t.shape == (nframe, dim)
    if not ok:
        raise RuntimeError(f"inconsistent target size: {_sizes(t.shape)} for input of size: {_sizes(x.shape)}")
    x = _dispatch_floating(x, "multilabel_margin_loss_forward_out_frame")
    t = _integer_target(t)
    keep = x.ndim == 2
    if nframe == 0:
        return jnp.zeros((0,), x.dtype) if reduction == "none" else _reduce(jnp.zeros((0,), x.dtype), reduction)
    if _is_concrete(t) and (np.min(np.asarray(t)) < -1 or np.max(np.asarray(t)) >= dim):
        raise RuntimeError("argument #2 'target' is out of range")
    return _multilabel_margin_jit(x.reshape(nframe, dim), t.reshape(nframe, dim), reduction, keep)
