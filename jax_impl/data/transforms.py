"""torchvision's transforms (v1, tensor path) on NumPy arrays, drawing torch's random numbers.

Images are ``(C, H, W)`` float arrays after :class:`ToTensor`, as torchvision
tensors are. The deterministic transforms compute what torchvision computes
(``ToTensor`` divides uint8 by 255 in float32, ``Normalize`` subtracts the
mean then divides by the std). The random ones draw from
``jax_impl.random.default_generator`` (or a given :class:`Generator`) exactly
the numbers torchvision draws from torch's global generator, in the same
order, so after ``torch.manual_seed(s)`` / ``jax_impl.random.manual_seed(s)``
the same images are flipped and cropped at the same offsets (also inside
DataLoader workers, which both seed their generator with ``base_seed +
worker_id``):

- ``RandomHorizontalFlip``: ``torch.rand(1) < p`` (one 24-bit draw);
- ``RandomCrop``: ``i = torch.randint(0, h - th + 1, (1,))`` then ``j`` the
  same for the width (none when the crop is the whole image).

Sources: torchvision/transforms/transforms.py and functional_tensor.py
(torchvision 0.2x).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax_impl import random as _random

__all__ = ["Compose", "Lambda", "Normalize", "RandomCrop", "RandomHorizontalFlip", "ToTensor"]


def _gen(generator):
    return _random.default_generator if generator is None else generator


class Compose:
    """Apply ``transforms`` in order (``torchvision.transforms.Compose``)."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        body = "".join(f"\n    {t}" for t in self.transforms)
        return f"{type(self).__name__}({body}\n)"


class Lambda:
    """Apply a user function (``torchvision.transforms.Lambda``)."""

    def __init__(self, lambd: Callable[[Any], Any]) -> None:
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)


class ToTensor:
    """HWC (or HW) array -> CHW; uint8 becomes float32 divided by 255, other dtypes pass unchanged.

    torchvision: ``img = from_numpy(pic.transpose((2, 0, 1)))``; if it is a
    ByteTensor, ``img.to(float32).div(255)``.
    """

    def __call__(self, pic):
        pic = np.asarray(pic)
        if pic.ndim not in (2, 3):
            raise ValueError(f"pic should be 2/3 dimensional. Got {pic.ndim} dimensions.")
        if pic.ndim == 2:
            pic = pic[:, :, None]
        img = np.ascontiguousarray(pic.transpose((2, 0, 1)))
        if img.dtype == np.uint8:
            return img.astype(np.float32) / np.float32(255)
        return img

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """``(x - mean) / std`` per channel of a float ``(..., C, H, W)`` array (``torchvision.transforms.Normalize``)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean = mean
        self.std = std
        self.inplace = inplace

    def __call__(self, tensor):
        tensor = np.asarray(tensor)
        if not np.issubdtype(tensor.dtype, np.floating):
            raise TypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")
        if tensor.ndim < 3:
            raise ValueError(
                f"Expected tensor to be a tensor image of size (..., C, H, W). Got tensor.size() = {tensor.shape}"
            )
        mean = np.asarray(self.mean, dtype=tensor.dtype)
        std = np.asarray(self.std, dtype=tensor.dtype)
        if (std == 0).any():
            raise ValueError(f"std evaluated to zero after conversion to {tensor.dtype}, leading to division by zero.")
        if mean.ndim == 1:
            mean = mean.reshape(-1, 1, 1)
        if std.ndim == 1:
            std = std.reshape(-1, 1, 1)
        out = tensor if self.inplace and tensor.flags.writeable else tensor.copy()
        np.subtract(out, mean, out=out)
        np.divide(out, std, out=out)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


class RandomHorizontalFlip:
    """Flip the last axis with probability ``p``: ``torch.rand(1) < p`` from the generator."""

    def __init__(self, p: float = 0.5, *, generator: _random.Generator | None = None) -> None:
        self.p = p
        self.generator = generator

    def __call__(self, img):
        draw = _gen(self.generator).rand(1)[0]  # float32, as torch.rand
        if draw < np.float32(self.p):  # torch compares the float32 tensor with p rounded to float32
            return np.ascontiguousarray(np.asarray(img)[..., ::-1])
        return img

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


_PAD_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def _parse_padding(padding) -> tuple[int, int, int, int]:
    """torchvision's padding: int, (lr, tb) or (left, top, right, bottom) -> (left, top, right, bottom)."""
    if isinstance(padding, numbers.Number):
        p = int(padding)
        return p, p, p, p
    padding = list(padding)
    if len(padding) == 1:
        return (int(padding[0]),) * 4
    if len(padding) == 2:
        return int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1])
    if len(padding) == 4:
        return tuple(int(p) for p in padding)
    raise ValueError(f"Padding must be an int or a 1, 2, or 4 element tuple, not a {len(padding)} element tuple")


def _check_reflect_padding(shape: tuple[int, ...], left: int, top: int, right: int, bottom: int) -> None:
    """Raise torch's ``reflection_pad2d`` error when a side's padding is not smaller than its dimension.

    torchvision's tensor ``pad`` adds a batch axis to inputs of fewer than
    four dimensions before ``torch.nn.functional.pad``, so the message names
    that shape, as torch's does. torch checks the width before the height.
    """
    shape = shape if len(shape) >= 4 else (1, *shape)
    dim_h, dim_w = len(shape) - 2, len(shape) - 1
    for arg, (a, b), dim in ((4, (left, right), dim_w), (6, (top, bottom), dim_h)):
        if not (a < shape[dim] and b < shape[dim]):
            raise RuntimeError(
                f"Argument #{arg}: Padding size should be less than the corresponding input dimension, "
                f"but got: padding ({a}, {b}) at dimension {dim} of input [{', '.join(map(str, shape))}]"
            )


def pad(img, padding, fill: float = 0, padding_mode: str = "constant"):
    """``torchvision.transforms.functional.pad`` on a ``(..., H, W)`` array.

    Raises:
        ValueError: ``padding_mode`` is not constant, edge, reflect or symmetric.
        RuntimeError: ``padding_mode="reflect"`` with a padding at least as large
            as its dimension: torch's reflection padding refuses it (NumPy would
            reflect again and again).
    """
    if padding_mode not in _PAD_MODES:
        raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
    left, top, right, bottom = _parse_padding(padding)
    img = np.asarray(img)
    if padding_mode == "reflect":
        _check_reflect_padding(img.shape, left, top, right, bottom)
    widths = [(0, 0)] * (img.ndim - 2) + [(top, bottom), (left, right)]
    if padding_mode == "constant":
        return np.pad(img, widths, mode="constant", constant_values=fill)
    return np.pad(img, widths, mode=_PAD_MODES[padding_mode])


class RandomCrop:
    """Crop a random ``size`` window, after optional padding (``torchvision.transforms.RandomCrop``)."""

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill: float = 0,
                 padding_mode: str = "constant", *, generator: _random.Generator | None = None) -> None:
        if isinstance(size, numbers.Number):
            size = (int(size), int(size))
        elif len(size) == 1:
            size = (int(size[0]), int(size[0]))
        elif len(size) != 2:
            raise ValueError("Please provide only two dimensions (h, w) for size.")
        self.size = tuple(int(s) for s in size)
        self.padding = padding
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode
        self.generator = generator

    def get_params(self, img, output_size) -> tuple[int, int, int, int]:
        """``(i, j, th, tw)``: the top-left corner drawn as torchvision draws it."""
        h, w = np.asarray(img).shape[-2:]
        th, tw = output_size
        if h < th or w < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}")
        if w == tw and h == th:
            return 0, 0, h, w
        gen = _gen(self.generator)
        i = int(gen.randint(0, h - th + 1, (1,))[0])
        j = int(gen.randint(0, w - tw + 1, (1,))[0])
        return i, j, th, tw

    def __call__(self, img):
        img = np.asarray(img)
        if self.padding is not None:
            img = pad(img, self.padding, self.fill, self.padding_mode)
        height, width = img.shape[-2:]
        if self.pad_if_needed and width < self.size[1]:
            img = pad(img, [self.size[1] - width, 0], self.fill, self.padding_mode)
        if self.pad_if_needed and height < self.size[0]:
            img = pad(img, [0, self.size[0] - height], self.fill, self.padding_mode)
        i, j, h, w = self.get_params(img, self.size)
        return np.ascontiguousarray(img[..., i:i + h, j:j + w])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, padding={self.padding})"
