"""torch's padding modules (``torch/nn/modules/padding.py``): ``F.pad`` with a fixed mode and padding.

``ReflectionPad1d/2d/3d``, ``ReplicationPad1d/2d/3d``, ``ZeroPad1d/2d/3d``, ``ConstantPad1d/2d/3d`` and
``CircularPad1d/2d/3d``; ``padding`` is an int (every side) or torch's tuple, last dimension first
(``(left, right, top, bottom, front, back)``).
"""

from __future__ import annotations

from jax_impl.nn import functional as F
from jax_impl.nn._arguments import ntuple
from jax_impl.nn.modules.module import Module

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
]


class _PadNd(Module):
    mode = "constant"
    dims = 1

    def __init__(self, padding, value: float = 0.0) -> None:
        self.padding = ntuple(padding, 2 * self.dims, f"{type(self).__name__}'s padding")
        self.value = float(value)

    def __call__(self, input):
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)


def _pad_class(name: str, mode: str, dims: int, doc: str) -> type:
    cls = type(name, (_PadNd,), {"mode": mode, "dims": dims, "__doc__": doc, "__module__": __name__})
    return cls


ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1, "``torch.nn.ReflectionPad1d``.")
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2, "``torch.nn.ReflectionPad2d`` (fast neural style).")
ReflectionPad3d = _pad_class("ReflectionPad3d", "reflect", 3, "``torch.nn.ReflectionPad3d``.")
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1, "``torch.nn.ReplicationPad1d``.")
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2, "``torch.nn.ReplicationPad2d``.")
ReplicationPad3d = _pad_class("ReplicationPad3d", "replicate", 3, "``torch.nn.ReplicationPad3d``.")
CircularPad1d = _pad_class("CircularPad1d", "circular", 1, "``torch.nn.CircularPad1d``.")
CircularPad2d = _pad_class("CircularPad2d", "circular", 2, "``torch.nn.CircularPad2d``.")
CircularPad3d = _pad_class("CircularPad3d", "circular", 3, "``torch.nn.CircularPad3d``.")
ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, "``torch.nn.ConstantPad1d(padding, value)``.")
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, "``torch.nn.ConstantPad2d(padding, value)``.")
ConstantPad3d = _pad_class("ConstantPad3d", "constant", 3, "``torch.nn.ConstantPad3d(padding, value)``.")


class ZeroPad1d(_PadNd):
    """``torch.nn.ZeroPad1d``."""

    dims = 1

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)


class ZeroPad2d(_PadNd):
    """``torch.nn.ZeroPad2d``."""

    dims = 2

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)


class ZeroPad3d(_PadNd):
    """``torch.nn.ZeroPad3d``."""

    dims = 3

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)
