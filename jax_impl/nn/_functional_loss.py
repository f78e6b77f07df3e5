"""torch.nn.functional's losses, softmax and log_softmax on jax arrays.

Every function has torch's name, argument names and defaults, and reproduces
the operation order of torch 2.13's CPU kernels (``aten/src/ATen/native/
Loss.cpp``, ``LossNLL.cpp``, ``SoftMax.cpp``, ``cpu/PointwiseOpsKernel.cpp``,
``cpu/BinaryOpsKernel.cpp``). Where torch's backward
is a hand-written kernel rather than autograd of the forward, a
``jax.custom_vjp`` reproduces that kernel's formula.

Three XLA:CPU habits would otherwise change the roundings: it contracts
``a * b + c`` into an FMA (:func:`jax_impl.kernels.rounded` keeps a
product's own rounding), it turns ``x / c`` into ``x * (1 / c)``
(:func:`_div_scalar` divides exactly, as torch's ``div``), and it
reassociates products of broadcast scalars.

Result (float32 and float64, under ``jax.jit``): mse, l1, smooth_l1 and huber
are bit-identical to torch with ``reduction='none'``, and so are their
gradients for every reduction. Losses through ``log``/``exp`` differ only by
the 1-ULP differences between torch's SLEEF and XLA's implementations of
those functions; scalar reductions differ by summation order.

Not reproduced: torch's eager value checks (BCE input outside ``[0, 1]``
raises in torch and gives NaN here; out-of-range class targets raise here
only outside ``jit``).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_impl import amp
from jax_impl.cpu_reductions import sum_rows
from jax_impl.kernels import div_scalar, rounded, runtime_zero_of

Array = jax.Array

# Loss.cpp: ``constexpr float EPSILON = 1e-12``, the BCE backward clamp; a
# float even for float64 inputs.
_EPSILON = float(np.float32(1e-12))


# ----------------------------------------------------------------------------- reduction


def legacy_get_string(size_average: bool | None, reduce: bool | None) -> str:
    """torch.nn._reduction.legacy_get_string, warning included."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        stacklevel=3,
    )
    return ret


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """Resolve the deprecated flags and validate like ``_Reduction.get_enum``."""
    if size_average is not None or reduce is not None:
        reduction = legacy_get_string(size_average, reduce)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use reduction='mean' instead.", stacklevel=3)
        return "mean"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss: Array, reduction: str) -> Array:
    if reduction == "mean":
        # torch's CPU mean is sum().div_(numel) (ReduceOps.cpp mean_out).
        return _div_scalar(_sum(loss), loss.size)
    if reduction == "sum":
        return _sum(loss)
    return loss


_GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE: larger reductions are split across torch's threads


def _sum(loss: Array) -> Array:
    """torch's CPU ``loss.sum()``: for float32/float64 under ``GRAIN_SIZE`` elements, ATen's ``cascade_sum``
    in its order (one contiguous row); XLA's sum otherwise.

    XLA adds in another order: a float32 sum of 1920 BCE terms came out 10 times farther from the float64
    sum than torch's, which a VAE's loss (``reduction='sum'``) carries into training.
    """
    if 0 < loss.size < _GRAIN_SIZE and loss.dtype in (jnp.float32, jnp.float64):
        # Rounded first: under jit a product in ``loss`` would otherwise fuse into the first addition (FMA).
        return sum_rows(rounded(loss, runtime_zero_of(loss)).reshape(1, -1))[0]
    return jnp.sum(loss)


def _size_warning(input: Array, target: Array) -> None:
    if input.shape != target.shape:
        warnings.warn(
            f"Using a target size ({_torch_size(target.shape)}) that is different to the input size "
            f"({_torch_size(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=3,
        )


def _torch_size(shape: tuple[int, ...]) -> str:
    return f"torch.Size([{', '.join(str(s) for s in shape)}])"


def _float(input, target=None) -> tuple[Array, Array | None]:
    input = jnp.asarray(input)
    if not jnp.issubdtype(input.dtype, jnp.floating):
        input = input.astype(jnp.float32)
    if target is None:
        return input, None
    return input, jnp.asarray(target, dtype=input.dtype)


def _scalar(value: float, dtype) -> Array:
    """A Python float as torch's kernels see it: ``scalar_t(value)``."""
    return jnp.asarray(np.asarray(value, dtype=np.float64).astype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _div_scalar(a: Array, s: float) -> Array:
    """``a / s`` correctly rounded, as torch's CPU ``div`` by a scalar.

    XLA:CPU turns a division by a scalar into a product with its reciprocal
    (1 ULP off for about a third of float32 quotients);
    :func:`jax_impl.kernels.div_scalar` adds the Markstein correction. The
    backward is again ``g / s``, as in torch's ``mean``/``div`` backward.
    """
    # The barrier keeps XLA from folding ``(a * (1 / s)) * s`` with a constant
    # ``s``; rounding ``a`` keeps it from merging an earlier scalar factor of
    # ``a`` with ``1 / s``.
    a = rounded(a, runtime_zero_of(a))
    quotient = div_scalar(a, lax.optimization_barrier(_scalar(s, a.dtype)))
    # The correction step turns an infinite quotient into inf - inf = NaN.
    return jnp.where(jnp.isfinite(a), quotient, a / _scalar(s, a.dtype))


_div_scalar.defvjp(
    lambda a, s: (_div_scalar(a, s), None),
    lambda s, _, g: (_div_scalar(g, s),),
)


# ----------------------------------------------------------------------------- softmax


def _class_dim(ndim: int, dim: int | None, name: str) -> int:
    if dim is None:
        # torch/nn/functional.py _get_softmax_dim (with its deprecation warning).
        warnings.warn(
            f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
            stacklevel=3,
        )
        return 0 if ndim in (0, 1, 3) else 1
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {dim})"
        )
    return dim % max(ndim, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _log_softmax(x: Array, dim: int) -> Array:
    # aten/src/ATen/native/cpu/SoftMaxKernel.cpp: out = x - max - log(sum(exp(x - max)))
    m = lax.stop_gradient(jnp.max(x, axis=dim, keepdims=True))
    shifted = x - m
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=dim, keepdims=True))


def _log_softmax_fwd(x, dim):
    out = _log_softmax(x, dim)
    return out, out


def _log_softmax_bwd(dim, out, g):
    # torch's log_softmax_backward_data: gI = gO - exp(out) * sum(gO).
    return (g - rounded(jnp.exp(out) * jnp.sum(g, axis=dim, keepdims=True), runtime_zero_of(out)),)


_log_softmax.defvjp(_log_softmax_fwd, _log_softmax_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _softmax(x: Array, dim: int) -> Array:
    m = jnp.max(x, axis=dim, keepdims=True)
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=dim, keepdims=True)


def _softmax_fwd(x, dim):
    out = _softmax(x, dim)
    return out, out


def _softmax_bwd(dim, out, g):
    # torch's softmax_backward_data: gI = out * (gO - sum(gO * out)).
    # Products rounded before the sum: a contracted FMA accumulation changes
    # the sum, and g - sum cancels when the softmax is peaked.
    return (out * (g - jnp.sum(rounded(g * out, runtime_zero_of(out)), axis=dim, keepdims=True)),)


_softmax.defvjp(_softmax_fwd, _softmax_bwd)


def log_softmax(input: Array, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Array:
    """``log_softmax(x)_i = x_i - max(x) - log(sum_j exp(x_j - max(x)))`` along ``dim``.

    Args:
        input: Any-rank array.
        dim: Axis to normalise. ``None`` picks torch's legacy implicit axis
            (0 for 0/1/3-D input, else 1) with torch's deprecation warning.
        _stacklevel: Accepted for signature compatibility, unused.
        dtype: If given, ``input`` is cast to it first (as torch does).

    Returns:
        Array of ``input``'s shape. Backward is torch's
        ``grad - exp(out) * sum(grad)``.
    """
    x = jnp.asarray(input, dtype=dtype) if dtype is not None else jnp.asarray(input)
    if x.ndim == 0:
        return x - x  # torch: log_softmax of a scalar is 0
    return _in_float32(_log_softmax, x, _class_dim(x.ndim, dim, "log_softmax"))


def softmax(input: Array, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Array:
    """``softmax(x)_i = exp(x_i - max(x)) / sum_j exp(x_j - max(x))`` along ``dim``.

    Args:
        input: Any-rank array.
        dim: Axis to normalise; ``None`` as in :func:`log_softmax`.
        _stacklevel: Accepted for signature compatibility, unused.
        dtype: If given, ``input`` is cast to it first.

    Returns:
        Array of ``input``'s shape. Backward is torch's
        ``out * (grad - sum(grad * out))``.
    """
    x = jnp.asarray(input, dtype=dtype) if dtype is not None else jnp.asarray(input)
    if x.ndim == 0:
        return jnp.ones_like(x)
    return _in_float32(_softmax, x, _class_dim(x.ndim, dim, "softmax"))


def _in_float32(kernel, x: Array, dim: int) -> Array:
    """``kernel(x, dim)``; a bf16 ``x`` computes in float32 and rounds once, as torch's CPU softmax kernels
    load bf16 into float32 vectors (``SoftMaxKernel.cpp``, ``vec_log_softmax_lastdim``)."""
    if x.dtype == jnp.bfloat16:
        return kernel(x.astype(jnp.float32), dim).astype(x.dtype)
    return kernel(x, dim)


# ----------------------------------------------------------------------------- nll / cross entropy


def _check_weight(weight, n_classes: int, dtype) -> Array | None:
    if weight is None:
        return None
    weight = jnp.asarray(weight, dtype=dtype)
    if weight.ndim != 1 or weight.shape[0] != n_classes:
        raise RuntimeError(
            f"weight tensor should be defined either for all {n_classes} classes or no classes but got weight "
            f"tensor of shape: {list(weight.shape)}"
        )
    return weight


@jax.custom_jvp
def _picked(logp: Array, index: Array) -> Array:
    """``logp[i, index[i], ...]``: the class axis 1 picked by ``index`` (``(N, d1, ...)``, in range).

    A gather; its tangent is the same pick written as a masked sum over the
    class axis, whose transpose is an elementwise select
    (``where(class == index, g, 0)``) that XLA computes in one pass with its
    neighbours, where the gather's own transpose fills a zero array of
    ``logp``'s size and scatters into it (on a language model's
    ``(tokens, vocabulary)`` log-probabilities, a 45 MB fill). Values are the
    same: one term per row, the others zeros.
    """
    return jnp.take_along_axis(logp, index[:, None], axis=1)[:, 0]


@_picked.defjvp
def _picked_jvp(primals, tangents):
    logp, index = primals
    mask = lax.broadcasted_iota(index.dtype, logp.shape, 1) == index[:, None]
    return _picked(logp, index), jnp.sum(jnp.where(mask, tangents[0], jnp.zeros((), logp.dtype)), axis=1)


def _nll(logp: Array, target: Array, weight: Array | None, reduction: str, ignore_index: int) -> Array:
    """nll_loss on log-probabilities with the class axis at 1 (or 0 for 1-D)."""
    if logp.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {logp.ndim})")
    target = jnp.asarray(target)
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {target.dtype}")
    if logp.ndim == 1:
        if target.ndim != 0:
            raise ValueError(f"0D target tensor expected for 1D input, got {target.ndim}D target")
        logp, target = logp[None], target[None]
        squeeze = True
    else:
        if logp.shape[0] != target.shape[0]:
            raise ValueError(
                f"Expected input batch_size ({logp.shape[0]}) to match target batch_size ({target.shape[0]})."
            )
        if target.shape[1:] != logp.shape[2:]:
            size = ", ".join(str(s) for s in (logp.shape[0], *logp.shape[2:]))
            raise RuntimeError(f"Expected target size [{size}], got [{', '.join(str(s) for s in target.shape)}]")
        squeeze = False
    n_classes = logp.shape[1]
    weight = _check_weight(weight, n_classes, logp.dtype)
    if not isinstance(target, jax.core.Tracer):
        # torch checks target values eagerly; under jit the check cannot run.
        bad = np.asarray(target)[
            (np.asarray(target) != ignore_index) & ((np.asarray(target) < 0) | (np.asarray(target) >= n_classes))
        ]
        if bad.size:
            raise IndexError(f"Target {bad.flat[0]} is out of bounds.")
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0).astype(jnp.int32)
    picked = _picked(logp, safe)
    w = jnp.ones((), logp.dtype) if weight is None else weight[safe]
    w = jnp.where(valid, w, jnp.zeros((), logp.dtype))
    # LossNLL.cpp nll_loss_out_frame: loss_i = -input[i][t_i] * w[t_i]; ignored rows are 0.
    loss = -(picked * w) if weight is not None else jnp.where(valid, -picked, jnp.zeros((), logp.dtype))
    if reduction == "none":
        return loss[0] if squeeze else loss
    if reduction == "sum":
        return jnp.sum(loss)
    # mean: sum / total_weight; all ignored gives 0/0 = NaN like torch, whose
    # backward then writes nothing (zero gradients): the NaN branch carries none.
    total, total_weight = jnp.sum(loss), jnp.sum(w)
    safe = jnp.where(total_weight == 0, jnp.ones((), logp.dtype), total_weight)
    return jnp.where(total_weight == 0, lax.stop_gradient(total / total_weight), total / safe)


@amp.autocast_op("nll_loss")
def nll_loss(
    input: Array,
    target: Array,
    weight: Array | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Negative log likelihood: ``loss_i = -w[y_i] * input[i, y_i]``, 0 where ``y_i == ignore_index``.

    ``mean`` is ``sum_i loss_i / sum_i w[y_i]`` over non-ignored elements (NaN
    when all are ignored); ``sum`` and ``none`` as usual.

    Args:
        input: Log-probabilities ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``.
        target: Integer class indices ``()``, ``(N,)`` or ``(N, d1, ...)``.
        weight: Optional per-class weight ``(C,)``.
        size_average: Deprecated, see ``torch.nn._reduction``.
        ignore_index: Target value that contributes neither loss nor weight.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss, shaped like ``target`` for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    logp, _ = _float(input)
    return _nll(logp, target, weight, reduction, ignore_index)


@amp.autocast_op("cross_entropy_loss")
def cross_entropy(
    input: Array,
    target: Array,
    weight: Array | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Array:
    """Cross entropy of logits, torch's three code paths (LossNLL.cpp).

    With ``logp = log_softmax(input, class_dim)`` (class_dim 1, or 0 for 1-D input):

    - class indices: ``nll_loss(logp, target, weight)``; with label smoothing
      ``eps``: ``(1 - eps) * nll + (eps / C) * smooth`` where
      ``smooth_i = -sum_c w_c logp_ic`` (0 where ignored), reduced as a sum
      divided by ``sum_i w[y_i]`` (or by the count of non-ignored) for ``mean``.
    - probabilities (``target.shape == input.shape``): ``t' = t (1 - eps) + eps / C``,
      ``loss_i = -sum_c logp_ic t'_ic w_c``; ``mean`` divides the total by
      ``numel / C``.

    Args:
        input: Logits ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``.
        target: Class indices, or class probabilities of ``input``'s shape.
        weight: Optional per-class weight ``(C,)``.
        size_average: Deprecated.
        ignore_index: Ignored class index (class-index targets only).
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        label_smoothing: ``eps`` in ``[0, 1]``.

    Returns:
        The loss, per element for ``'none'``, else a scalar.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, _ = _float(input)
    target = jnp.asarray(target)
    if x.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {x.ndim})")
    class_dim = 0 if x.ndim == 1 else 1
    logp = _log_softmax(x, class_dim)
    eps = float(label_smoothing)
    if x.shape == target.shape:
        if not jnp.issubdtype(target.dtype, jnp.floating):
            raise RuntimeError(f"Expected floating point type for target with class probabilities, got {target.dtype}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if eps > 0.0 and eps > 1.0:
            raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {eps}")
        return _cross_entropy_prob(logp, target.astype(x.dtype), weight, reduction, eps, class_dim)
    if eps > 0.0:
        if eps > 1.0:
            raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {eps}")
        return _cross_entropy_smoothed(logp, target, weight, reduction, ignore_index, eps, class_dim)
    return _nll(logp, target, weight, reduction, ignore_index)


def _class_broadcast(weight: Array, ndim: int, class_dim: int) -> Array:
    shape = [1] * ndim
    shape[class_dim] = weight.shape[0]
    return weight.reshape(shape)


def _cross_entropy_prob(logp, target, weight, reduction, eps, class_dim):
    n_classes = logp.shape[class_dim]
    weight = _check_weight(weight, n_classes, logp.dtype)
    if eps > 0.0:
        target = rounded(target * _scalar(1 - eps, logp.dtype), runtime_zero_of(target)) + _scalar(
            eps / n_classes, logp.dtype
        )
    zero = runtime_zero_of(logp)
    prod = rounded(logp * target, zero)
    if weight is not None:
        prod = rounded(prod * _class_broadcast(weight, logp.ndim, class_dim), zero)
    if reduction == "none":
        return -jnp.sum(prod, axis=class_dim)
    total = -jnp.sum(prod)
    if reduction == "sum":
        return total
    if logp.size == 0:
        return jnp.full((), jnp.nan, logp.dtype)
    return _div_scalar(total, logp.size // n_classes)


def _cross_entropy_smoothed(logp, target, weight, reduction, ignore_index, eps, class_dim):
    n_classes = logp.shape[class_dim]
    nll = _nll(logp, target, weight, reduction, ignore_index)
    weight = _check_weight(weight, n_classes, logp.dtype)
    if weight is not None:
        smooth = -jnp.sum(logp * _class_broadcast(weight, logp.ndim, class_dim), axis=class_dim)
    else:
        smooth = -jnp.sum(logp, axis=class_dim)
    ignore = jnp.asarray(target) == ignore_index
    smooth = jnp.where(ignore, jnp.zeros((), logp.dtype), smooth)
    if reduction == "mean":
        if weight is not None:
            safe = jnp.where(ignore, 0, target).astype(jnp.int32)
            denom = jnp.sum(jnp.where(ignore, jnp.zeros((), logp.dtype), weight[safe]))
        else:
            denom = jnp.sum(~ignore).astype(logp.dtype)
        ret = jnp.sum(smooth) / denom
    elif reduction == "sum":
        ret = jnp.sum(smooth)
    else:
        ret = smooth
    zero = runtime_zero_of(logp)
    return rounded(_scalar(1 - eps, logp.dtype) * nll, zero) + rounded(
        ret * _scalar(eps / n_classes, logp.dtype), zero
    )


# ----------------------------------------------------------------------------- binary cross entropy


def _bce_elem(p: Array, t: Array) -> Array:
    # Loss.cpp binary_cross_entropy_out_cpu: log1p(-p) (not log(1 - p)), both logs clamped at -100.
    one = jnp.ones((), p.dtype)
    lo = jnp.asarray(-100, p.dtype)
    zero = runtime_zero_of(p)
    first = rounded((t - one) * jnp.maximum(jnp.log1p(-p), lo), zero)
    return first - rounded(t * jnp.maximum(jnp.log(p), lo), zero)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _bce(p: Array, t: Array, w: Array, reduction: str) -> Array:
    return _reduce(_bce_elem(p, t) * w, reduction)


def _bce_fwd(p, t, w, reduction):
    return _bce(p, t, w, reduction), (p, t, w)


def _bce_bwd(reduction, res, g):
    p, t, w = res
    one = jnp.ones((), p.dtype)
    # binary_cross_entropy_backward_out_cpu: g (p - t) / max((1 - p) p, EPSILON), * w, / numel.
    gp = g * (p - t) / jnp.maximum((one - p) * p, _scalar(_EPSILON, p.dtype)) * w
    # FunctionsManual binary_cross_entropy_target_backward: -logit(p) * g * w / numel.
    gt = -jnp.log(p / (one - p)) * g * w
    # torch marks weight non-differentiable; this is the true derivative.
    gw = _bce_elem(p, t) * g
    if reduction == "mean":
        gp, gt, gw = (_div_scalar(gr, p.size) for gr in (gp, gt, gw))
    return gp, gt, gw


_bce.defvjp(_bce_fwd, _bce_bwd)


@amp.autocast_op("binary_cross_entropy")
def binary_cross_entropy(
    input: Array,
    target: Array,
    weight: Array | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Array:
    """Binary cross entropy of probabilities.

    ``loss = w * ((t - 1) * max(log1p(-p), -100) - t * max(log(p), -100))``,
    torch's CPU kernel (``log1p(-p)``, not ``log(1 - p)``). Backward is torch's
    ``g (p - t) / max(p (1 - p), 1e-12) * w``. Input outside ``[0, 1]`` gives
    NaN here; torch raises (a value check that cannot run under ``jit``).

    Args:
        input: Probabilities, any shape.
        target: Same shape as ``input`` (ValueError otherwise, like torch).
        weight: Optional weight broadcastable to ``target``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        The loss.
    """
    reduction = _reduction(size_average, reduce, reduction)
    p, t = _float(input, target)
    if t.shape != p.shape:
        raise ValueError(
            f"Using a target size ({_torch_size(t.shape)}) that is different to the input size "
            f"({_torch_size(p.shape)}) is deprecated. Please ensure they have the same size."
        )
    w = jnp.ones((), p.dtype) if weight is None else jnp.asarray(weight, p.dtype)
    w = jnp.broadcast_to(w, jnp.broadcast_shapes(t.shape, w.shape))
    return _bce(p, t, w, reduction)


def _log_sigmoid(x: Array) -> Array:
    # cpu/Activation.cpp log_sigmoid_cpu_kernel: min(x, 0) - log1p(exp(-|x|)).
    return jnp.minimum(x, jnp.zeros((), x.dtype)) - jnp.log1p(jnp.exp(-jnp.abs(x)))


@amp.autocast_op("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(
    input: Array,
    target: Array,
    weight: Array | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Array | None = None,
) -> Array:
    """Binary cross entropy of logits, torch's stable form (Loss.cpp).

    ``loss = w * ((1 - t) * x - (1 + (pos_weight - 1) * t) * log_sigmoid(x))``
    with ``log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))``; ``pos_weight``
    broadcasts against ``target`` (over its last, class axis).

    Args:
        input: Logits, any shape.
        target: Same shape as ``input`` (ValueError otherwise).
        weight: Optional weight broadcastable to the loss.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        pos_weight: Optional weight of positive examples, broadcastable to ``target``.

    Returns:
        The loss.
    """
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _float(input, target)
    if t.shape != x.shape:
        raise ValueError(
            f"Target size ({_torch_size(t.shape)}) must be the same as input size ({_torch_size(x.shape)})"
        )
    w = jnp.ones((), x.dtype) if weight is None else jnp.asarray(weight, x.dtype)
    pw = None if pos_weight is None else jnp.asarray(pos_weight, x.dtype)
    shape = jnp.broadcast_shapes(x.shape, w.shape, () if pw is None else pw.shape)
    if shape != x.shape:
        raise RuntimeError(
            f"weight/pos_weight of shapes {w.shape}/{None if pw is None else pw.shape} do not broadcast to {x.shape}"
        )
    w = jnp.broadcast_to(w, shape)
    if pw is None:
        return _bce_logits(x, t, w, reduction)
    return _bce_logits_pos(x, t, w, jnp.broadcast_to(pw, shape), reduction)


def _bce_logits_elem(x, t, pw):
    # Loss.cpp: (1 - t) * x - log_sigmoid(x) * ((pos_weight - 1) * t + 1), each op rounded.
    one = jnp.ones((), x.dtype)
    zero = runtime_zero_of(x)
    log_sig = _log_sigmoid(x)
    if pw is not None:
        log_sig = rounded(log_sig * (rounded((pw - one) * t, zero) + one), zero)
    return rounded((one - t) * x, zero) - log_sig


def _bce_logits_grads(x, t, w, pw, reduction, g):
    """torch's binary_cross_entropy_with_logits_backward and _target_backward (FunctionsManual.cpp)."""
    one = jnp.ones((), x.dtype)
    zero = runtime_zero_of(x)
    sig = one / (one + jnp.exp(-x))
    if pw is None:
        gx = (sig - t) * g
        gt = -x * g
    else:
        tp = rounded(pw * t, zero)
        gx = (rounded((tp + one - t) * sig, zero) - tp) * g
        gt = (_log_sigmoid(-x) - rounded(_log_sigmoid(x) * pw, zero)) * g
    # g is a broadcast scalar for mean/sum: keep XLA from merging it with w.
    gx, gt = rounded(gx, zero), rounded(gt, zero)
    # torch marks weight and pos_weight non-differentiable; these are the true derivatives.
    gw = _bce_logits_elem(x, t, pw) * g
    gpw = None if pw is None else -t * _log_sigmoid(x) * g * w
    grads = [gx * w, gt * w, gw] + ([] if pw is None else [gpw])
    if reduction == "mean":
        grads = [_div_scalar(gr, x.size) for gr in grads]
    return tuple(grads)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _bce_logits(x, t, w, reduction):
    return _reduce(_bce_logits_elem(x, t, None) * w, reduction)


_bce_logits.defvjp(
    lambda x, t, w, reduction: (_bce_logits(x, t, w, reduction), (x, t, w)),
    lambda reduction, res, g: _bce_logits_grads(*res, None, reduction, g),
)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _bce_logits_pos(x, t, w, pw, reduction):
    return _reduce(_bce_logits_elem(x, t, pw) * w, reduction)


_bce_logits_pos.defvjp(
    lambda x, t, w, pw, reduction: (_bce_logits_pos(x, t, w, pw, reduction), (x, t, w, pw)),
    lambda reduction, res, g: _bce_logits_grads(*res, reduction, g),
)


# ----------------------------------------------------------------------------- regression


def _pointwise_loss(elem, slope):
    """A loss ``reduce(elem(x - t))`` whose backward is torch's kernel ``norm * slope(x - t) * g``.

    torch's mse/smooth_l1/huber backward kernels (cpu/PointwiseOpsKernel.cpp,
    vectorised path) compute ``norm_val * slope * grad_output`` with
    ``norm_val = scalar_t(1. / numel)`` for mean (``2. / numel`` for MSE) and
    the same with the arguments swapped for the target, i.e. its negation.
    """

    @functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
    def loss(x, t, reduction, param):
        return _reduce(elem(x - t, param), reduction)

    def fwd(x, t, reduction, param):
        return loss(x, t, reduction, param), (x, t)

    def bwd(reduction, param, res, g):
        x, t = res
        scale, q = slope(x - t, param)
        norm = scale / x.size if reduction == "mean" else scale
        gx = rounded(_scalar(norm, x.dtype) * q, runtime_zero_of(x)) * g
        return gx, -gx

    loss.defvjp(fwd, bwd)
    return loss


def _mse_elem(d, _):
    return d * d


def _mse_slope(d, _):
    return 2.0, d


def _smooth_l1_elem(d, beta):
    z = jnp.abs(d)
    b = _scalar(beta, d.dtype)
    half = _scalar(0.5, d.dtype)
    # cpu/BinaryOpsKernel.cpp smooth_l1_kernel
    return jnp.where(z < b, _div_scalar(half * z * z, beta), z - rounded(half * b, runtime_zero_of(d)))


def _smooth_l1_slope(d, beta):
    b = _scalar(beta, d.dtype)
    sign = jnp.where(d > 0, jnp.ones((), d.dtype), -jnp.ones((), d.dtype))
    return 1.0, jnp.where(jnp.abs(d) >= b, sign, _div_scalar(d, beta))


def _huber_elem(d, delta):
    z = jnp.abs(d)
    dl = _scalar(delta, d.dtype)
    half = _scalar(0.5, d.dtype)
    # cpu/BinaryOpsKernel.cpp huber_kernel
    return jnp.where(z < dl, half * z * z, dl * (z - rounded(half * dl, runtime_zero_of(d))))


def _huber_slope(d, delta):
    dl = _scalar(delta, d.dtype)
    sign = jnp.where(d > 0, jnp.ones((), d.dtype), -jnp.ones((), d.dtype))
    return 1.0, jnp.where(jnp.abs(d) >= dl, sign * dl, d)


_mse = _pointwise_loss(_mse_elem, _mse_slope)
_smooth_l1 = _pointwise_loss(_smooth_l1_elem, _smooth_l1_slope)
_huber = _pointwise_loss(_huber_elem, _huber_slope)


@jax.custom_jvp
def _abs(x: Array) -> Array:
    """``torch.abs``, whose derivative is ``sgn(x)``: 0 at 0 (jax's ``abs`` gives 1 there)."""
    return jnp.abs(x)


_abs.defjvp(lambda primals, tangents: (_abs(primals[0]), tangents[0] * jnp.sign(primals[0])))


def _regression_args(input, target, size_average, reduce, reduction, weighted=False):
    x, t = _float(input, target)
    _size_warning(x, t)
    if size_average is not None or reduce is not None:
        reduction = legacy_get_string(size_average, reduce)
    if weighted:
        # torch/nn/functional.py's weighted branch validates with its own message.
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    else:
        reduction = _reduction(None, None, reduction)
    x, t = jnp.broadcast_arrays(x, t)
    return x, t, reduction


def _weighted(unweighted: Array, weight, input_shape, reduction: str, mean_by_weight: bool = True) -> Array:
    """torch/nn/functional.py's weighted mse/l1/huber.

    ``mean`` is ``sum(loss * w) / sum(w)`` for mse and l1 but a plain mean of
    ``loss * w`` for huber (``mean_by_weight=False``), as torch 2.13 does.
    """
    weight = jnp.asarray(weight, unweighted.dtype)
    if weight.shape != input_shape:
        raise ValueError("Weights and input must have the same size.")
    loss = unweighted * weight
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    if not mean_by_weight:
        return _reduce(loss, "mean")
    return jnp.sum(loss) / jnp.sum(weight)


@amp.autocast_op("mse_loss")
def mse_loss(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Array | None = None,
) -> Array:
    """Squared error ``(x - t)^2``; backward ``norm * (x - t) * g`` with ``norm = 2 (/ numel)``.

    Args:
        input: Any shape.
        target: Broadcastable to ``input`` (torch warns when sizes differ).
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        weight: Optional elementwise weight of ``input``'s shape; ``mean`` is
            then ``sum(w (x - t)^2) / sum(w)``.

    Returns:
        The loss.
    """
    shape = jnp.shape(input)
    x, t, reduction = _regression_args(input, target, size_average, reduce, reduction, weight is not None)
    if weight is not None:
        d = x - t
        return _weighted(d * d, weight, shape, reduction)
    return _mse(x, t, reduction, None)


@amp.autocast_op("l1_loss")
def l1_loss(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Array | None = None,
) -> Array:
    """Absolute error ``|x - t|`` (torch's composite ``(x - t).abs()``).

    Args:
        input: Any shape.
        target: Broadcastable to ``input``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        weight: Optional elementwise weight; ``mean`` is ``sum(w |x - t|) / sum(w)``.

    Returns:
        The loss.
    """
    shape = jnp.shape(input)
    x, t, reduction = _regression_args(input, target, size_average, reduce, reduction, weight is not None)
    loss = _abs(x - t)
    if weight is not None:
        return _weighted(loss, weight, shape, reduction)
    return _reduce(loss, reduction)


@amp.autocast_op("smooth_l1_loss")
def smooth_l1_loss(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Array:
    """Smooth L1: ``0.5 z^2 / beta`` if ``z < beta`` else ``z - 0.5 beta``, ``z = |x - t|``.

    ``beta == 0`` is :func:`l1_loss`, as in torch.

    Args:
        input: Any shape.
        target: Broadcastable to ``input``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        beta: Non-negative threshold.

    Returns:
        The loss.
    """
    x, t, reduction = _regression_args(input, target, size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0.0:
        return _reduce(_abs(x - t), reduction)
    return _smooth_l1(x, t, reduction, float(beta))


@amp.autocast_op("huber_loss")
def huber_loss(
    input: Array,
    target: Array,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Array | None = None,
) -> Array:
    """Huber: ``0.5 z^2`` if ``z < delta`` else ``delta (z - 0.5 delta)``, ``z = |x - t|``.

    Args:
        input: Any shape.
        target: Broadcastable to ``input``.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        delta: Positive threshold.
        weight: Optional elementwise weight; ``mean`` is ``mean(w l)`` (torch divides
            by the element count here, unlike weighted mse/l1).

    Returns:
        The loss.
    """
    shape = jnp.shape(input)
    x, t, reduction = _regression_args(input, target, None, None, reduction, weight is not None)
    if not delta > 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if weight is not None:
        return _weighted(_huber(x, t, "none", float(delta)), weight, shape, reduction, mean_by_weight=False)
    return _huber(x, t, reduction, float(delta))


@amp.autocast_op("kl_div")
def kl_div(
    input: Array,
    target: Array,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Array:
    """Kullback-Leibler divergence with ``input`` as log-probabilities (Loss.cpp).

    ``log_target=False``: ``xlogy(t, t) - t * x`` (``xlogy(0, t) = 0``; NaN for ``t < 0`` or NaN ``t``);
    ``log_target=True``: ``exp(t) * (t - x)``. ``'batchmean'`` is the sum
    divided by ``input.shape[0]``; ``'mean'`` averages over all elements.

    Args:
        input: Log-probabilities, any shape.
        target: Probabilities (or log-probabilities), broadcastable.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'batchmean'`` | ``'sum'`` | ``'mean'``.
        log_target: Whether ``target`` is given in log space.

    Returns:
        The loss.
    """
    x, t = _float(input, target)
    if size_average is not None or reduce is not None:
        reduction = legacy_get_string(size_average, reduce)
    if reduction == "batchmean":
        inner = "sum"
    else:
        inner = _reduction(None, None, reduction)
    if log_target:
        out = jnp.exp(t) * (t - x)
    else:
        # torch's kl_div: xlogy(t, t) - t * x, so a negative or NaN target gives NaN and the input
        # gradient is -t everywhere. No "safe log": torch's autograd gives NaN target gradients
        # where t == 0, and so does jax's through this where.
        zero = jnp.zeros((), x.dtype)
        out = jnp.where(t == zero, zero, t * jnp.log(t)) - t * x
    reduced = _reduce(out, inner)
    if reduction == "batchmean" and x.ndim != 0:
        reduced = _div_scalar(reduced, x.shape[0])
    return reduced
