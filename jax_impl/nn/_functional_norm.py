"""``torch.nn.functional.batch_norm`` and SyncBatchNorm's statistics merge, as pure functions.

torch's CPU kernels (``aten/src/ATen/native/Normalization.cpp``,
``native/cpu/batch_norm_kernel.cpp``), per channel ``c`` over the ``n = N *
prod(spatial)`` values:

- training: ``mean = sum(x) / n``; ``var_sum = sum((x - mean)^2)`` (two
  passes); ``invstd = 1 / sqrt(var_sum / n + eps)`` (the **biased** variance
  normalises); running stats ``rm = m * mean + (1 - m) * rm`` and
  ``rv = m * var_sum / (n - 1) + (1 - m) * rv`` (the **unbiased** variance is
  tracked);
- eval: ``invstd = 1 / sqrt(rv + eps)`` with ``mean = rm``;
- then ``alpha = invstd * weight``, ``beta = bias - mean * alpha`` and
  ``y = x * alpha + beta``;
- backward in training (``batch_norm_cpu_backward_contiguous_impl``), with
  ``sum = sum(dy)`` and ``dotp = sum((x - mean) * dy)`` per channel:
  ``dx = (dy - sum / n - (x - mean) * dotp * invstd^2 / n) * invstd * weight``,
  ``dweight = dotp * invstd``, ``dbias = sum``. It is the transpose of the
  custom JVP of :func:`batch_norm`'s training path, so forward-mode and
  higher-order derivatives work as well.

torch accumulates float32 sums and the running-stat update in double; here
they are float32 unless jax x64 is on, which differs from torch by a few ULP
(measured in tests/nn/modules/test_batchnorm.py).

torch updates the running statistics in place; JAX arrays are immutable, so
:func:`batch_norm` **returns** them: ``(y, new_running_mean,
new_running_var)``, the inputs unchanged where torch would not update them.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from jax_impl.nn._materialize import kept_in_memory

__all__ = ["batch_norm", "batch_norm_stats", "gather_stats_with_counts", "sync_batch_norm"]


def _verify_batch_size(shape: tuple[int, ...]) -> None:
    # torch.nn.functional._verify_batch_size
    if shape[0] * math.prod(shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {_torch_size(shape)}")


def _torch_size(shape) -> str:
    return f"torch.Size({list(shape)})"


def _channel_view(v, ndim: int):
    return jnp.reshape(v, (1, -1) + (1,) * (ndim - 2))


def batch_norm_stats(x, eps: float):
    """``torch.batch_norm_stats``: per-channel ``(mean, invstd, var_sum)`` of ``x`` (N, C, ...)."""
    axes = (0, *range(2, x.ndim))
    n = x.size // x.shape[1]
    mean = jnp.sum(x, axis=axes) / n
    centred = x - _channel_view(mean, x.ndim)
    var_sum = jnp.sum(centred * centred, axis=axes)
    invstd = 1 / jnp.sqrt(var_sum / n + eps)
    return mean, invstd, var_sum


def affine(mean, invstd, weight, bias):
    """torch's per-channel ``(alpha, beta)``: ``alpha = invstd * weight``, ``beta = bias - mean * alpha``."""
    alpha = invstd if weight is None else invstd * weight
    beta = -mean * alpha if bias is None else bias - mean * alpha
    return alpha, beta


def eval_invstd(running_var, eps: float):
    """Eval mode's ``1 / sqrt(running_var + eps)``."""
    return 1 / jnp.sqrt(running_var + jnp.asarray(eps, running_var.dtype))


def _normalize(x, mean, invstd, weight, bias):
    alpha, beta = affine(mean, invstd, weight, bias)
    return x * _channel_view(alpha, x.ndim) + _channel_view(beta, x.ndim)


def _update(running, stat, momentum):
    if running is None:
        return None
    momentum = jnp.asarray(momentum, running.dtype)
    return momentum * stat.astype(running.dtype) + (1 - momentum) * running


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def _train_normalize(x, weight, bias, eps: float):
    """Training-mode ``(y, mean, var_sum)`` with batch statistics."""
    mean, invstd, var_sum = batch_norm_stats(x, eps)
    return _normalize(x, mean, invstd, weight, bias), mean, var_sum


def _is_zero(t) -> bool:
    return t is None or isinstance(t, SymbolicZero)


def _train_normalize_jvp(eps, primals, tangents):
    # The tangent is written so that its transpose is torch's backward
    # (batch_norm_cpu_backward_contiguous_impl) with its two reductions of the
    # output's cotangent g: sum = sum(g) and dotp = sum((x - mean) * g), then
    #   dx = (g - sum / n - (x - mean) * dotp * invstd^2 / n) * invstd * w,
    #   dw = dotp * invstd, db = sum.
    # Each full-size term is a full-size array times one per-channel factor that
    # gathers every tangent, so the transpose reduces g and (x - mean) * g once
    # each; a second form of either would be a second pass over the activation.
    x, weight, bias = primals
    dx, dw, db = tangents
    axes = (0, *range(2, x.ndim))
    n = x.size // x.shape[1]
    mean, invstd, var_sum = batch_norm_stats(x, eps)
    y = _normalize(x, mean, invstd, weight, bias)
    centred = x - _channel_view(mean, x.ndim)
    scale = invstd if weight is None else invstd * weight
    shift = jnp.zeros_like(mean)        # per-channel tangent added to every value
    slope = jnp.zeros_like(mean)        # per-channel tangent times (x - mean)
    dy = None
    dmean = dvar_sum = jnp.zeros_like(mean)
    if not _is_zero(dx):
        dsum = jnp.sum(dx, axis=axes)
        ddotp = jnp.sum(centred * dx, axis=axes)
        dy = dx * _channel_view(scale, x.ndim)
        shift = shift - dsum * (scale / n)
        slope = slope - ddotp * (scale * invstd * invstd / n)
        dmean = dsum / n
        dvar_sum = 2 * ddotp
    if not _is_zero(dw):
        slope = slope + dw * invstd
    if not _is_zero(db):
        shift = shift + db
    rest = centred * _channel_view(slope, x.ndim) + _channel_view(shift, x.ndim)
    dy = rest if dy is None else dy + rest
    return (y, mean, var_sum), (dy, dmean, dvar_sum)


_train_normalize.defjvp(_train_normalize_jvp, symbolic_zeros=True)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum=0.1, eps: float = 1e-5):
    """``torch.nn.functional.batch_norm`` returning ``(y, new_running_mean, new_running_var)``.

    Args:
      input: ``(N, C)``, ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
      running_mean, running_var: ``(C,)`` or ``None``; used in eval, updated
        (returned) in training.
      weight, bias: ``(C,)`` affine parameters or ``None``.
      training: normalise with batch statistics (and update the running ones).
      momentum: the running-stat factor (float or a traced scalar, e.g.
        ``1 / num_batches_tracked`` for torch's ``momentum=None``).
      eps: added to the variance.

    Returns:
      The output and the new running statistics (the given ones when not
      training; ``None`` stays ``None``).
    """
    x = jnp.asarray(input)
    if training:
        _verify_batch_size(x.shape)
        if x.size == 0:
            # aten's batch_norm_cpu returns the empty output and leaves the running statistics as they are.
            zeros = jnp.zeros(x.shape[1:2], x.dtype)
            return _normalize(x, zeros, zeros + 1, weight, bias), running_mean, running_var
        # Read five times (mean, variance, output; two reductions in the backward pass): kept in
        # memory, else XLA:CPU fuses its producer into each read, e.g. the transpose out of a
        # convolution's NHWC result (measured on XLA:CPU: a ResNet-18 train step ~10% faster).
        x = kept_in_memory(x)
        y, mean, var_sum = _train_normalize(x, weight, bias, eps)
        n = x.size // x.shape[1]
        # torch divides by n - 1 even for n == 1 only if the size check passed, so n >= 2 here.
        new_rm = _update(running_mean, mean, momentum)
        new_rv = _update(running_var, var_sum / (n - 1), momentum)
        return y, new_rm, new_rv
    if running_mean is None or running_var is None:
        raise ValueError("running_mean and running_var must be defined in evaluation mode")
    return _normalize(x, running_mean, eval_invstd(running_var, eps), weight, bias), running_mean, running_var


def gather_stats_with_counts(mean_all, invstd_all, counts, eps: float):
    """torch's ``batch_norm_gather_stats_with_counts`` merge (``batch_norm_reduce_statistics_kernel``).

    Merges per-replica ``(mean_j, invstd_j, count_j)`` (rows of ``(R, C)``
    arrays, ``counts`` ``(R,)``) in replica order, Chan et al.'s pairwise
    update as torch's CUDA kernel does it::

        v_j = (1 / invstd_j^2 - eps) * count_j
        f = 1 / (n + c_j); var_n += v_j + (avg - m_j)^2 * n * c_j * f
        avg = n * f * avg + c_j * f * m_j; n += c_j

    Replicas with count 0 are skipped. Returns ``(mean, invstd, var_n, n)``.
    """
    avg = jnp.zeros(mean_all.shape[1:], mean_all.dtype)
    var_n = jnp.zeros_like(avg)
    n = jnp.zeros((), mean_all.dtype)
    for j in range(mean_all.shape[0]):
        c = counts[j].astype(mean_all.dtype)
        m = mean_all[j]
        v = (1 / (invstd_all[j] * invstd_all[j]) - eps) * c
        safe = jnp.where(c > 0, 1 / jnp.where(c > 0, n + c, 1), 0)
        new_var = var_n + v + (avg - m) * (avg - m) * n * c * safe
        new_avg = n * safe * avg + c * safe * m
        var_n = jnp.where(c > 0, new_var, var_n)
        avg = jnp.where(c > 0, new_avg, avg)
        n = n + c
    invstd = 1 / jnp.sqrt(var_n / n + eps)
    return avg, invstd, var_n, n


def sync_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps: float, axis_name):
    """Training-mode BatchNorm with statistics merged across ``axis_name`` as torch's SyncBatchNorm.

    Each replica computes ``(mean, invstd, count)``; they are all-gathered
    over ``axis_name`` (inside ``pmap``/``vmap``/``shard_map``) and merged by
    :func:`gather_stats_with_counts` in replica order; the running variance
    takes the unbiased global variance ``var_n / (n - 1)``. Returns
    ``(y, new_running_mean, new_running_var)``.
    """
    x = jnp.asarray(input)
    mean, invstd, _ = batch_norm_stats(x, eps)
    count = jnp.asarray(x.size // x.shape[1], mean.dtype)
    mean_all = lax.all_gather(mean, axis_name)
    invstd_all = lax.all_gather(invstd, axis_name)
    counts = lax.all_gather(count, axis_name)
    g_mean, g_invstd, var_n, n = gather_stats_with_counts(mean_all, invstd_all, counts, eps)
    new_rm = _update(running_mean, g_mean, momentum)
    new_rv = _update(running_var, var_n / (n - 1), momentum)
    return _normalize(x, g_mean, g_invstd, weight, bias), new_rm, new_rv
