"""``torch.nn.Conv{1,2,3}d`` and ``torch.nn.ConvTranspose{1,2,3}d`` as ``flax.nnx`` modules.

Constructor checks, attribute names, weight layouts and ``padding_mode``
handling follow ``torch/nn/modules/conv.py``:

- Conv weight ``(out_channels, in_channels // groups, *kernel_size)``;
  transposed-conv weight ``(in_channels, out_channels // groups, *kernel_size)``.
- ``padding_mode != 'zeros'`` pads the input first with
  ``F.pad(x, _reversed_padding_repeated_twice, mode=padding_mode)`` and then
  convolves with zero padding, as torch's ``_conv_forward`` does ('same'
  puts the odd element of an even total on the high side).
- ``ConvTranspose.__call__(x, output_size=...)`` turns a requested output size
  into ``output_padding`` with torch's ``_output_padding`` (and its error).
- ``LazyConv{1,2,3}d`` / ``LazyConvTranspose{1,2,3}d`` read ``in_channels``
  off the first call's input and then become the eager class (torch's
  ``_LazyConvXdMixin`` and ``cls_to_become``; see :mod:`jax_impl.nn.modules.lazy`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jax_impl.nn import functional as F
from jax_impl.nn import init
from jax_impl.nn.modules._utils import factory_dtype, init_key, ntuple, reverse_repeat_tuple
from jax_impl.nn.modules.lazy import LazyModuleMixin, UninitializedParameter
from jax_impl.nn.modules.module import Module

__all__ = [
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
]

_VALID_PADDING_STRINGS = {"same", "valid"}
_VALID_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


class _ConvNd(Module):
    """torch's ``_ConvNd``: shared construction and checks."""

    _nd: int

    def __init__(
        self, in_channels, out_channels, kernel_size, stride, padding, dilation, transposed,
        output_padding, groups, bias, padding_mode, device, dtype, rngs,
    ) -> None:
        nd = self._nd
        kernel_size, stride, dilation = ntuple(kernel_size, nd), ntuple(stride, nd), ntuple(dilation, nd)
        if not isinstance(padding, str):
            padding = ntuple(padding, nd)
        output_padding = ntuple(output_padding, nd)
        dtype = factory_dtype(device, dtype)
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in _VALID_PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {_VALID_PADDING_STRINGS}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _VALID_PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {_VALID_PADDING_MODES}, but got padding_mode='{padding_mode}'"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = output_padding
        self.groups = groups
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            reversed_pad = [0, 0] * nd
            if padding == "same":
                for d, k, i in zip(dilation, kernel_size, range(nd - 1, -1, -1)):
                    total = d * (k - 1)
                    reversed_pad[2 * i] = total // 2
                    reversed_pad[2 * i + 1] = total - total // 2
            self._reversed_padding_repeated_twice = tuple(reversed_pad)
        else:
            self._reversed_padding_repeated_twice = reverse_repeat_tuple(padding, 2)
        self._create_parameters(bias, dtype, rngs)

    def _create_parameters(self, bias: bool, dtype, rngs) -> None:
        """torch's ``reset_parameters``: kaiming-uniform weight, uniform bias, drawn now."""
        params = init.conv_default(
            init_key(rngs), self.out_channels, self.in_channels // self.groups, self.kernel_size, bias,
            self.transposed, self.groups, dtype,
        )
        self.weight = nnx.Param(params["weight"])
        self.bias = nnx.Param(params["bias"]) if bias else None

    def _bias(self):
        return None if self.bias is None else self.bias[...]


class _Conv(_ConvNd):
    def __init__(
        self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
        groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None,
        *, rngs: nnx.Rngs | None = None,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups, bias,
            padding_mode, device, dtype, rngs,
        )

    def __call__(self, input):
        conv = getattr(F, f"conv{self._nd}d")
        if self.padding_mode != "zeros":
            input = F.pad(input, list(self._reversed_padding_repeated_twice), mode=self.padding_mode)
            return conv(input, self.weight[...], self._bias(), self.stride, 0, self.dilation, self.groups)
        return conv(input, self.weight[...], self._bias(), self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_Conv):
    """``torch.nn.Conv1d`` on ``(N, C, L)`` or unbatched ``(C, L)`` input.

    Args:
      in_channels, out_channels, kernel_size, stride, padding (int, tuple,
        ``'same'`` or ``'valid'``), dilation, groups, bias, padding_mode
        (``'zeros'``, ``'reflect'``, ``'replicate'``, ``'circular'``), device,
        dtype: as torch.
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream, so the weights equal torch's after the same seed.
    """

    _nd = 1


class Conv2d(_Conv):
    """``torch.nn.Conv2d`` on ``(N, C, H, W)`` or unbatched ``(C, H, W)`` input (arguments as :class:`Conv1d`)."""

    _nd = 2


class Conv3d(_Conv):
    """``torch.nn.Conv3d`` on ``(N, C, D, H, W)`` or unbatched input (arguments as :class:`Conv1d`)."""

    _nd = 3


class _ConvTranspose(_ConvNd):
    def __init__(
        self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
        groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None, dtype=None,
        *, rngs: nnx.Rngs | None = None,
    ) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} does not take string padding, got padding={padding!r}")
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, True, output_padding, groups,
            bias, padding_mode, device, dtype, rngs,
        )

    def _output_padding(self, input, output_size) -> tuple[int, ...]:
        """torch's ``_ConvTransposeNd._output_padding``: ``output_size`` -> ``output_padding``."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        has_batch_dim = input.ndim == nd + 2
        non_spatial = 2 if has_batch_dim else 1
        output_size = list(output_size)
        if len(output_size) == non_spatial + nd:
            output_size = output_size[non_spatial:]
        if len(output_size) != nd:
            raise ValueError(
                f"ConvTranspose{nd}D: for {input.ndim}D input, output_size must have {nd} "
                f"or {non_spatial + nd} elements (got {len(output_size)})"
            )
        min_sizes = [
            (input.shape[d + non_spatial] - 1) * self.stride[d] - 2 * self.padding[d]
            + self.dilation[d] * (self.kernel_size[d] - 1) + 1
            for d in range(nd)
        ]
        max_sizes = [lo + s - 1 for lo, s in zip(min_sizes, self.stride)]
        for size, lo, hi in zip(output_size, min_sizes, max_sizes):
            if size < lo or size > hi:
                raise ValueError(
                    f"requested an output size of {output_size}, but valid sizes range "
                    f"from {min_sizes} to {max_sizes} (for an input of torch.Size({list(input.shape[2:])}))"
                )
        return tuple(int(size - lo) for size, lo in zip(output_size, min_sizes))

    def __call__(self, input, output_size=None):
        input = jnp.asarray(input)
        if input.ndim not in (self._nd + 1, self._nd + 2):
            raise ValueError(
                f"ConvTranspose{self._nd}d: expected {self._nd + 1}D (unbatched) or {self._nd + 2}D (batched) "
                f"input, got {input.ndim}D"
            )
        output_padding = self._output_padding(input, output_size)
        return getattr(F, f"conv_transpose{self._nd}d")(
            input, self.weight[...], self._bias(), self.stride, self.padding, output_padding, self.groups,
            self.dilation,
        )


class ConvTranspose1d(_ConvTranspose):
    """``torch.nn.ConvTranspose1d``; ``__call__(x, output_size=None)`` as torch's ``forward``.

    Args:
      in_channels, out_channels, kernel_size, stride, padding, output_padding,
        groups, bias, dilation, padding_mode (only ``'zeros'``), device, dtype:
        as torch (note torch's argument order: ``groups, bias, dilation``).
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream (torch-identical weights after the same seed).
    """

    _nd = 1


class ConvTranspose2d(_ConvTranspose):
    """``torch.nn.ConvTranspose2d`` (arguments as :class:`ConvTranspose1d`)."""

    _nd = 2


class ConvTranspose3d(_ConvTranspose):
    """``torch.nn.ConvTranspose3d`` (arguments as :class:`ConvTranspose1d`)."""

    _nd = 3


class _LazyConvXdMixin(LazyModuleMixin):
    """torch's ``_LazyConvXdMixin``: ``in_channels`` read off the first input, then torch's init.

    The constructor runs the eager class's with ``in_channels = out_channels = 0``
    and no bias, as torch's does (so ``out_channels % groups`` is not checked),
    and leaves :class:`UninitializedParameter` placeholders; the first call
    materialises ``weight`` (``(out, in // groups, *k)``, transposed
    ``(in, out // groups, *k)``) and ``bias`` ``(out,)`` with the eager class's
    init, drawing from torch's global stream when ``rngs`` is ``None``.
    """

    def _create_parameters(self, bias: bool, dtype, rngs) -> None:
        # Nothing is drawn until the first call; the placeholders carry the dtype to materialise in.
        self.weight = UninitializedParameter.empty(dtype)
        self.bias = UninitializedParameter.empty(dtype) if bias else None
        self.rngs = rngs

    def _get_in_channels(self, input) -> int:
        nd = self._nd
        if input.ndim not in (nd + 1, nd + 2):
            raise RuntimeError(
                f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {type(self).__name__}, but got "
                f"input of size: torch.Size({list(input.shape)})"
            )
        return int(input.shape[1] if input.ndim == nd + 2 else input.shape[0])

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        """Materialise ``weight`` and ``bias`` for ``input``'s channel dimension (torch's arithmetic and order)."""
        if not self.has_uninitialized_params():
            return
        self.in_channels = self._get_in_channels(jnp.asarray(input))
        if self.in_channels % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        dtype = self.weight.get_value().dtype
        # Concrete numbers even when the first call is traced (nnx.jit): they are the new parameters.
        with jax.ensure_compile_time_eval():
            params = init.conv_default(
                init_key(self.rngs), self.out_channels, self.in_channels // self.groups, self.kernel_size,
                self.bias is not None, self.transposed, self.groups, dtype,
            )
        self.weight = nnx.Param(params["weight"])
        if self.bias is not None:
            self.bias = nnx.Param(params["bias"])
        self.rngs = None

    def __call__(self, input, *args, **kwargs):
        forward = super().__call__  # bound before the first call turns self into cls_to_become
        self._infer_parameters(input, *args, **kwargs)
        return forward(input, *args, **kwargs)


class _LazyConv(_LazyConvXdMixin, _Conv):
    def __init__(
        self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1, bias: bool = True,
        padding_mode: str = "zeros", device=None, dtype=None, *, rngs: nnx.Rngs | None = None,
    ) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype,
                         rngs=rngs)
        self.out_channels = out_channels


class LazyConv1d(_LazyConv, Conv1d):
    """``torch.nn.LazyConv1d``: :class:`Conv1d` whose ``in_channels`` is ``input.shape[-2]`` of the first call.

    Args:
      out_channels, kernel_size, stride, padding, dilation, groups, bias,
        padding_mode, device, dtype: as torch (``Conv1d``'s without ``in_channels``).
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream at the first call, as torch's lazy module does.

    After the first call the module is a :class:`Conv1d` (torch's ``cls_to_become``).
    """

    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    """``torch.nn.LazyConv2d``: becomes :class:`Conv2d` at the first call (arguments as :class:`LazyConv1d`)."""

    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    """``torch.nn.LazyConv3d``: becomes :class:`Conv3d` at the first call (arguments as :class:`LazyConv1d`)."""

    cls_to_become = Conv3d


class _LazyConvTranspose(_LazyConvXdMixin, _ConvTranspose):
    def __init__(
        self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, groups: int = 1,
        bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None, dtype=None,
        *, rngs: nnx.Rngs | None = None,
    ) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, bias, dilation, padding_mode,
                         device, dtype, rngs=rngs)
        self.out_channels = out_channels


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    """``torch.nn.LazyConvTranspose1d``: :class:`ConvTranspose1d` whose ``in_channels`` the first call reads.

    Args:
      out_channels, kernel_size, stride, padding, output_padding, groups, bias,
        dilation, padding_mode (only ``'zeros'``), device, dtype: as torch.
      rngs: ``nnx.Rngs`` for the init; ``None`` draws from torch's global
        generator stream at the first call, as torch's lazy module does.

    ``__call__(x, output_size=None)``; after the first call the module is a
    :class:`ConvTranspose1d` (torch's ``cls_to_become``).
    """

    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    """``torch.nn.LazyConvTranspose2d``: becomes :class:`ConvTranspose2d` (arguments as :class:`LazyConvTranspose1d`)."""

    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    """``torch.nn.LazyConvTranspose3d``: becomes :class:`ConvTranspose3d` (arguments as :class:`LazyConvTranspose1d`)."""

    cls_to_become = ConvTranspose3d
