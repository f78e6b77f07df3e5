"""torch.nn's pooling layers as ``flax.nnx`` modules (no parameters).

Each module stores torch's constructor arguments under torch's attribute names
and calls the matching :mod:`jax_impl.nn.functional` op, which reproduces
torch's output sizes (``ceil_mode``), padding checks, divisors
(``count_include_pad``, ``divisor_override``) and ``return_indices``.
"""

from __future__ import annotations

import jax.numpy as jnp

from jax_impl.nn import functional as F
from jax_impl.nn.modules._utils import ntuple
from jax_impl.nn.modules.module import Buffer, Module

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "FractionalMaxPool2d", "FractionalMaxPool3d",
    "LPPool1d", "LPPool2d", "LPPool3d",
    "MaxPool1d", "MaxPool2d", "MaxPool3d",
    "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
]


class _MaxPoolNd(Module):
    _nd: int

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def __call__(self, input):
        return getattr(F, f"max_pool{self._nd}d")(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )


class MaxPool1d(_MaxPoolNd):
    """``torch.nn.MaxPool1d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False)``.

    With ``return_indices=True`` returns ``(values, indices)``, indices being
    flat offsets into each input plane, as torch (first maximum wins ties;
    NaN propagates).
    """

    _nd = 1


class MaxPool2d(_MaxPoolNd):
    """``torch.nn.MaxPool2d`` (arguments as :class:`MaxPool1d`)."""

    _nd = 2


class MaxPool3d(_MaxPoolNd):
    """``torch.nn.MaxPool3d`` (arguments as :class:`MaxPool1d`)."""

    _nd = 3


class AvgPool1d(Module):
    """``torch.nn.AvgPool1d(kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True)``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def __call__(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class _AvgPoolNd(Module):
    _nd: int

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def __call__(self, input):
        return getattr(F, f"avg_pool{self._nd}d")(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
            self.divisor_override,
        )


class AvgPool2d(_AvgPoolNd):
    """``torch.nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
    divisor_override=None)``."""

    _nd = 2


class AvgPool3d(_AvgPoolNd):
    """``torch.nn.AvgPool3d`` (arguments as :class:`AvgPool2d`)."""

    _nd = 3


class _AdaptiveAvgPoolNd(Module):
    _nd: int

    def __init__(self, output_size) -> None:
        self.output_size = output_size

    def __call__(self, input):
        return getattr(F, f"adaptive_avg_pool{self._nd}d")(input, self.output_size)


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool1d(output_size)``: bin ``i`` averages ``[floor(i*L/O), ceil((i+1)*L/O))``."""

    _nd = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool2d(output_size)``; ``None`` in ``output_size`` keeps that input size."""

    _nd = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool3d(output_size)``."""

    _nd = 3


class _AdaptiveMaxPoolNd(Module):
    _nd: int

    def __init__(self, output_size, return_indices: bool = False) -> None:
        self.output_size = output_size
        self.return_indices = return_indices

    def __call__(self, input):
        return getattr(F, f"adaptive_max_pool{self._nd}d")(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool1d(output_size, return_indices=False)``."""

    _nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool2d(output_size, return_indices=False)``."""

    _nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool3d(output_size, return_indices=False)``."""

    _nd = 3


class _LPPoolNd(Module):
    _nd: int

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> None:
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride  # torch keeps None: the functional reads it as kernel_size
        self.ceil_mode = ceil_mode

    def __call__(self, input):
        return getattr(F, f"lp_pool{self._nd}d")(input, float(self.norm_type), self.kernel_size, self.stride,
                                                 self.ceil_mode)


class LPPool1d(_LPPoolNd):
    r"""``torch.nn.LPPool1d(norm_type, kernel_size, stride=None, ceil_mode=False)``: power-average pooling.

    Per window :math:`f(X) = \sqrt[p]{\sum_{x \in X} x^{p}}` (``p = norm_type``), computed as torch
    does: ``avg_pool1d(x ** p)`` times the window size, clamped at 0 by ``sign * relu(abs)``, to the
    power ``1 / p`` (:func:`jax_impl.nn.functional.lp_pool1d`). ``p = inf`` pools ``|x|`` by its max.
    The gradient is 0 where a window's power sum is 0, as torch's.
    """

    _nd = 1


class LPPool2d(_LPPoolNd):
    r"""``torch.nn.LPPool2d(norm_type, kernel_size, stride=None, ceil_mode=False)``:
    :math:`f(X) = \sqrt[p]{\sum_{x \in X} x^{p}}` over ``kH x kW`` windows (see :class:`LPPool1d`)."""

    _nd = 2


class LPPool3d(_LPPoolNd):
    r"""``torch.nn.LPPool3d(norm_type, kernel_size, stride=None, ceil_mode=False)``:
    :math:`f(X) = \sqrt[p]{\sum_{x \in X} x^{p}}` over ``kD x kH x kW`` windows (see :class:`LPPool1d`)."""

    _nd = 3


class _FractionalMaxPoolNd(Module):
    _nd: int

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None) -> None:
        name = type(self).__name__
        self.kernel_size = ntuple(kernel_size, self._nd)
        self.return_indices = return_indices
        # torch's buffer: absent from the state dict while None.
        self._random_samples = None if _random_samples is None else Buffer(jnp.asarray(_random_samples))
        self.output_size = ntuple(output_size, self._nd) if output_size is not None else None
        self.output_ratio = ntuple(output_ratio, self._nd) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio[:self._nd]):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def __call__(self, input):
        samples = None if self._random_samples is None else self._random_samples[...]
        return getattr(F, f"fractional_max_pool{self._nd}d")(
            input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            _random_samples=samples,
        )


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    r"""``torch.nn.FractionalMaxPool2d(kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None)``: max over ``kH x kW`` windows at pseudo-random starts (Graham, 2014).

    Per plane and axis, with a sample :math:`u \in [0, 1)` and :math:`\alpha = (L - K) / (O - 1)`,
    window :math:`i < O - 1` starts at :math:`\lfloor (i + u)\alpha \rfloor - \lfloor u\alpha \rfloor`
    and the last at :math:`L - K`, computed in the input's dtype as torch's CPU kernel. Without
    ``_random_samples`` each call draws torch's ``rand(N, C, 2)`` from the global stream
    (:data:`jax_impl.random.default_generator`), so after the same seed outputs and indices equal torch's.
    Exactly one of ``output_size`` / ``output_ratio`` (each in ``(0, 1)``) is given.
    """

    _nd = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    r"""``torch.nn.FractionalMaxPool3d(kernel_size, output_size=None, output_ratio=None, return_indices=False,
    _random_samples=None)``: :class:`FractionalMaxPool2d` over ``kT x kH x kW`` windows, samples
    ``rand(N, C, 3)`` (time, height, width); ``kernel_size`` must be positive, as torch checks."""

    _nd = 3

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None) -> None:
        if (isinstance(kernel_size, int) and kernel_size <= 0) or (
                isinstance(kernel_size, (tuple, list)) and not all(k > 0 for k in kernel_size)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        super().__init__(kernel_size, output_size, output_ratio, return_indices, _random_samples)


class _MaxUnpoolNd(Module):
    _nd: int

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        self.kernel_size = ntuple(kernel_size, self._nd)
        self.stride = ntuple(stride if stride is not None else kernel_size, self._nd)
        self.padding = ntuple(padding, self._nd)

    def __call__(self, input, indices, output_size=None):
        return getattr(F, f"max_unpool{self._nd}d")(input, indices, self.kernel_size, self.stride, self.padding,
                                                    output_size)


class MaxUnpool1d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool1d(kernel_size, stride=None, padding=0)``: ``MaxPool1d``'s values written back at
    their indices into zeros of length ``(L_in - 1) * stride - 2 * padding + kernel_size`` (or the call's
    ``output_size``), :func:`jax_impl.nn.functional.max_unpool1d`."""

    _nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool2d(kernel_size, stride=None, padding=0)``: ``MaxPool2d``'s values written back at
    their flat ``H_out * W_out`` indices (:func:`jax_impl.nn.functional.max_unpool2d`)."""

    _nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool3d(kernel_size, stride=None, padding=0)``: ``MaxPool3d``'s values written back at
    their flat ``D_out * H_out * W_out`` indices (:func:`jax_impl.nn.functional.max_unpool3d`)."""

    _nd = 3
