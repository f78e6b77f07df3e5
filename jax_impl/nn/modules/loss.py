"""torch.nn's loss modules as ``flax.nnx`` modules.

Each class takes torch's constructor arguments (deprecated ``size_average`` /
``reduce`` included, resolved once at construction like torch's ``_Loss``)
and calls the matching function of :mod:`jax_impl.nn._functional_loss`
(:mod:`jax_impl.nn._functional_margin_loss` for the margin losses).
``weight`` and ``pos_weight`` are :class:`Buffer` variables, so
``nnx.state(module, Buffer)`` holds torch's ``state_dict`` keys (``weight``,
``pos_weight``), absent when ``None`` as in torch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jax_impl.nn import _functional_loss as F
from jax_impl.nn import _functional_margin_loss as MF
from jax_impl.nn._functional_ctc_loss import ctc_loss
from jax_impl.nn._functional_gaussian_nll_loss import gaussian_nll_loss
from jax_impl.nn._functional_linear_cross_entropy import linear_cross_entropy
from jax_impl.nn._functional_poisson_nll_loss import poisson_nll_loss
from jax_impl.nn.modules.linear import Linear
from jax_impl.nn.modules.module import Buffer, Module

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "Buffer",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "GaussianNLLLoss",
    "HingeEmbeddingLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "LinearCrossEntropyLoss",
    "MSELoss",
    "MarginRankingLoss",
    "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "NLLLoss",
    "PoissonNLLLoss",
    "SmoothL1Loss",
    "SoftMarginLoss",
]


def _buffer(value) -> Buffer | None:
    return None if value is None else Buffer(jnp.asarray(value))


def _value(buffer: Buffer | None) -> jax.Array | None:
    return None if buffer is None else buffer[...]


class _Loss(Module):
    """torch.nn.modules.loss._Loss: resolves the legacy reduction flags once."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        if size_average is not None or reduce is not None:
            reduction = F.legacy_get_string(size_average, reduce)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.weight = _buffer(weight)


class L1Loss(_Loss):
    """``|x - t|``, reduced; see :func:`jax_impl.nn._functional_loss.l1_loss`."""

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """``(x - t)^2``, reduced; see :func:`jax_impl.nn._functional_loss.mse_loss`."""

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    """``-w[y] * input[y]``; see :func:`jax_impl.nn._functional_loss.nll_loss`.

    Args:
        weight: Optional per-class weight ``(C,)``, stored as buffer ``weight``.
        size_average: Deprecated.
        ignore_index: Target value that is skipped.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
    """

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.nll_loss(
            input, target, weight=_value(self.weight), ignore_index=self.ignore_index, reduction=self.reduction
        )


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits; see :func:`jax_impl.nn._functional_loss.cross_entropy`.

    Args:
        weight: Optional per-class weight ``(C,)``, stored as buffer ``weight``.
        size_average: Deprecated.
        ignore_index: Target value that is skipped (class-index targets only).
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        label_smoothing: ``eps`` in ``[0, 1]``.
    """

    def __init__(
        self,
        weight=None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.cross_entropy(
            input,
            target,
            weight=_value(self.weight),
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities; see :func:`jax_impl.nn._functional_loss.binary_cross_entropy`."""

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.binary_cross_entropy(input, target, weight=_value(self.weight), reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits; see :func:`jax_impl.nn._functional_loss.binary_cross_entropy_with_logits`.

    Args:
        weight: Optional weight, stored as buffer ``weight``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        pos_weight: Optional positive-class weight, stored as buffer ``pos_weight``.
    """

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.weight = _buffer(weight)
        self.pos_weight = _buffer(pos_weight)

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.binary_cross_entropy_with_logits(
            input, target, weight=_value(self.weight), reduction=self.reduction, pos_weight=_value(self.pos_weight)
        )


class SmoothL1Loss(_Loss):
    """Smooth L1 with threshold ``beta``; see :func:`jax_impl.nn._functional_loss.smooth_l1_loss`."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss with threshold ``delta``; see :func:`jax_impl.nn._functional_loss.huber_loss`."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(_Loss):
    """KL divergence; see :func:`jax_impl.nn._functional_loss.kl_div`."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CosineEmbeddingLoss(_Loss):
    """Cosine embedding loss; see :func:`jax_impl.nn._functional_margin_loss.cosine_embedding_loss`."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def __call__(self, input1: jax.Array, input2: jax.Array, target: jax.Array) -> jax.Array:
        return MF.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    """Hinge embedding loss; see :func:`jax_impl.nn._functional_margin_loss.hinge_embedding_loss`."""

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return MF.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """``max(-y (x1 - x2) + margin, 0)``; see :func:`jax_impl.nn._functional_margin_loss.margin_ranking_loss`."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def __call__(self, input1: jax.Array, input2: jax.Array, target: jax.Array) -> jax.Array:
        return MF.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multilabel hinge loss; see :func:`jax_impl.nn._functional_margin_loss.multilabel_margin_loss`."""

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return MF.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Multilabel soft margin loss; see :func:`jax_impl.nn._functional_margin_loss.multilabel_soft_margin_loss`.

    ``weight`` (optional, broadcastable) is the buffer ``weight``.
    """

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return MF.multilabel_soft_margin_loss(input, target, weight=_value(self.weight), reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss; see :func:`jax_impl.nn._functional_margin_loss.multi_margin_loss`.

    Args:
        p: 1 or 2 (ValueError otherwise, as in torch).
        margin: The margin.
        weight: Optional 1-D per-class weight ``(C,)``, stored as buffer ``weight``.
        size_average: Deprecated.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
    """

    def __init__(
        self, p: int = 1, margin: float = 1.0, weight=None, size_average=None, reduce=None, reduction: str = "mean"
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if p != 1 and p != 2:
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and jnp.ndim(weight) != 1:
            raise ValueError(
                f"MultiMarginLoss: expected weight to be None or 1D tensor, got {jnp.ndim(weight)}D instead"
            )
        self.p = p
        self.margin = margin

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return MF.multi_margin_loss(
            input, target, p=self.p, margin=self.margin, weight=_value(self.weight), reduction=self.reduction
        )


class SoftMarginLoss(_Loss):
    """``log1p(exp(-y x))``; see :func:`jax_impl.nn._functional_margin_loss.soft_margin_loss`."""

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        return MF.soft_margin_loss(input, target, reduction=self.reduction)


class CTCLoss(_Loss):
    """Connectionist Temporal Classification loss; see :func:`jax_impl.nn._functional_ctc_loss.ctc_loss`.

    ``nll_n = -log sum_{alignments of target_n} prod_t log_probs[t, n, path_t]``
    (log-space alpha recursion, torch's CPU kernel and its backward);
    ``'mean'`` is ``mean_n(nll_n / max(target_length_n, 1))``.

    Args:
        blank: The blank label.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        zero_infinity: Zero infinite losses and their gradients.
    """

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        super().__init__(reduction=reduction)
        self.blank = blank
        self.zero_infinity = zero_infinity

    def __call__(self, log_probs: jax.Array, targets: jax.Array, input_lengths, target_lengths) -> jax.Array:
        return ctc_loss(
            log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction, self.zero_infinity
        )


class GaussianNLLLoss(_Loss):
    """``0.5 (log(max(var, eps)) + (x - t)^2 / max(var, eps))`` (+ ``0.5 log(2 pi)`` if ``full``).

    See :func:`jax_impl.nn._functional_gaussian_nll_loss.gaussian_nll_loss`.

    Args:
        full: Include the constant term.
        eps: Lower clamp of ``var`` (outside autograd, as torch).
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(None, None, reduction)
        self.full = full
        self.eps = eps

    def __call__(self, input: jax.Array, target: jax.Array, var) -> jax.Array:
        return gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """``exp(x) - t x`` (``log_input``) or ``x - t log(x + eps)``, plus Stirling's term where ``t > 1`` if ``full``.

    See :func:`jax_impl.nn._functional_poisson_nll_loss.poisson_nll_loss`.

    Args:
        log_input: Whether the input is a log-rate.
        full: Add ``t log t - t + 0.5 log(2 pi t)`` where ``t > 1``.
        size_average: Deprecated.
        eps: Added inside the log when ``log_input=False``.
        reduce: Deprecated.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
    """

    def __init__(
        self,
        log_input: bool = True,
        full: bool = False,
        size_average=None,
        eps: float = 1e-8,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input = log_input
        self.full = full
        self.eps = eps

    def __call__(self, log_input: jax.Array, target: jax.Array) -> jax.Array:
        return poisson_nll_loss(
            log_input, target, log_input=self.log_input, full=self.full, eps=self.eps, reduction=self.reduction
        )


class LinearCrossEntropyLoss(_WeightedLoss):
    """Cross entropy of ``input @ W.T + b``; see :func:`jax_impl.nn._functional_linear_cross_entropy.linear_cross_entropy`.

    ``linear`` is a :class:`~jax_impl.nn.modules.linear.Linear` of
    ``C * prod(out_features)`` outputs, stored flat as in torch (state dict
    keys ``linear.weight``, ``linear.bias``, and ``weight`` when given) and
    reshaped to ``(C, *out_features, in_features)`` in the forward; its default
    init draws torch's numbers from the global stream.

    Args:
        in_features: Size of each input sample.
        num_classes: Number of classes ``C``.
        out_features: ``(d_1, ..., d_K)`` of a K-dimensional loss.
        bias: Learn a bias of logical shape ``(C, *out_features)``.
        device: ``None`` / ``"cpu"``.
        dtype: Parameter dtype.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        weight: Optional per-class weight ``(C,)``, stored as buffer ``weight``.
        ignore_index: Ignored class index, ``None`` meaning -100 for class-index targets.
        label_smoothing: In ``[0, 1]``.
        options: ``None`` (torch's chunked path is not provided).
        rngs: ``nnx.Rngs`` for the init instead of torch's stream.
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        *,
        out_features: tuple[int, ...] = (),
        bias: bool = False,
        device=None,
        dtype=None,
        reduction: str = "mean",
        weight=None,
        ignore_index: int | None = None,
        label_smoothing: float = 0.0,
        options=None,
        rngs=None,
    ) -> None:
        if weight is not None and tuple(jnp.shape(weight)) != (num_classes,):
            raise RuntimeError(f"expected weight shape to be {(num_classes,)}, got {tuple(jnp.shape(weight))}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        super().__init__(weight, None, None, reduction)
        self.num_classes = num_classes
        self.out_features = tuple(out_features)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.linear = Linear(
            in_features, math.prod(out_features, start=num_classes), bias=bias, device=device, dtype=dtype, rngs=rngs
        )
        self.options = options

    def __call__(self, input: jax.Array, target: jax.Array) -> jax.Array:
        linear_weight = self.linear.weight[...].reshape((self.num_classes, *self.out_features, self.linear.in_features))
        linear_bias = (
            None if self.linear.bias is None else self.linear.bias[...].reshape((self.num_classes, *self.out_features))
        )
        return linear_cross_entropy(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            weight=_value(self.weight),
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            options=self.options,
        )
