"""torch.nn's pooling layers as ``flax.nnx`` modules (no parameters).

Each module stores torch's constructor arguments under torch's attribute names
and calls the matching :mod:`jax_impl.nn.functional` op, which reproduces
torch's output sizes (``ceil_mode``), padding checks, divisors
(``count_include_pad``, ``divisor_override``) and ``return_indices``.
"""

from __future__ import annotations

from jax_impl.nn import functional as F
from jax_impl.nn.modules.module import Module

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "MaxPool1d", "MaxPool2d", "MaxPool3d",
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
