"""The torch side of the data pipeline: real ``torch.utils.data`` objects over the same data.

- :func:`digits` / :func:`synthetic`: the data sets of ``jax_impl.data.datasets``
  as ``torch.utils.data.TensorDataset`` s (or transformed datasets), the split
  and the synthetic draws made with torch's own ``randperm`` / ``rand`` /
  ``randint``;
- ``Compose``, ``ToTensor``, ``Normalize``, ``RandomHorizontalFlip``,
  ``RandomCrop``: torchvision's tensor code paths (torchvision 0.2x
  ``transforms.py`` / ``functional_tensor.py``) written out with torch ops,
  since torchvision is not a dependency; random draws come from torch's
  global generator exactly as torchvision draws them;
- :func:`build_dataloader`: the real ``torch.utils.data.DataLoader`` from a
  config's ``data:`` section.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from jax_impl.data.datasets import digits_arrays  # NumPy only: the same arrays on both sides, without jax

__all__ = [
    "Compose", "Normalize", "RandomCrop", "RandomHorizontalFlip", "ToTensor", "TransformedDataset",
    "build_dataloader", "digits", "synthetic",
]


class Compose:
    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor:
    """torchvision ``to_tensor`` for ndarrays: HWC -> CHW, ByteTensor -> float / 255."""

    def __call__(self, pic):
        pic = np.asarray(pic)
        if pic.ndim == 2:
            pic = pic[:, :, None]
        img = torch.from_numpy(pic.transpose((2, 0, 1))).contiguous()
        if isinstance(img, torch.ByteTensor):
            return img.to(dtype=torch.get_default_dtype()).div(255)
        return img


class Normalize:
    """torchvision ``normalize`` on tensors: ``tensor.sub_(mean).div_(std)`` per channel."""

    def __init__(self, mean, std, inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = mean, std, inplace

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self.inplace:
            tensor = tensor.clone()
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        if mean.ndim == 1:
            mean = mean.view(-1, 1, 1)
        if std.ndim == 1:
            std = std.view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)


class RandomHorizontalFlip:
    """torchvision: ``if torch.rand(1) < self.p: return F.hflip(img)``."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if torch.rand(1) < self.p:
            return img.flip(-1)
        return img


def _pad(img: torch.Tensor, padding, fill=0, padding_mode: str = "constant") -> torch.Tensor:
    """torchvision ``functional_tensor.pad`` (constant, edge, reflect; symmetric via numpy's rule)."""
    if isinstance(padding, numbers.Number):
        left = right = top = bottom = int(padding)
    elif len(padding) == 1:
        left = right = top = bottom = int(padding[0])
    elif len(padding) == 2:
        left = right = int(padding[0])
        top = bottom = int(padding[1])
    else:
        left, top, right, bottom = (int(p) for p in padding)
    p = [left, right, top, bottom]
    if padding_mode == "constant":
        return torch.nn.functional.pad(img, p, mode="constant", value=float(fill))
    if padding_mode == "symmetric":
        arr = np.pad(img.numpy(), [(0, 0)] * (img.ndim - 2) + [(top, bottom), (left, right)], mode="symmetric")
        return torch.from_numpy(arr)
    mode = "replicate" if padding_mode == "edge" else padding_mode
    need_batch = img.ndim < 4
    out = torch.nn.functional.pad(img[None] if need_batch else img, p, mode=mode)
    return out[0] if need_batch else out


class RandomCrop:
    """torchvision ``RandomCrop`` (tensor path): pad, then ``torch.randint`` for the row, then the column."""

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill=0, padding_mode: str = "constant"):
        self.size = (int(size), int(size)) if isinstance(size, numbers.Number) else tuple(size) * (2 // len(size))
        self.padding, self.pad_if_needed, self.fill, self.padding_mode = padding, pad_if_needed, fill, padding_mode

    @staticmethod
    def get_params(img: torch.Tensor, output_size) -> tuple[int, int, int, int]:
        h, w = img.shape[-2:]
        th, tw = output_size
        if h < th or w < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}")
        if w == tw and h == th:
            return 0, 0, h, w
        i = torch.randint(0, h - th + 1, size=(1,)).item()
        j = torch.randint(0, w - tw + 1, size=(1,)).item()
        return i, j, th, tw

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if self.padding is not None:
            img = _pad(img, self.padding, self.fill, self.padding_mode)
        height, width = img.shape[-2:]
        if self.pad_if_needed and width < self.size[1]:
            img = _pad(img, [self.size[1] - width, 0], self.fill, self.padding_mode)
        if self.pad_if_needed and height < self.size[0]:
            img = _pad(img, [0, self.size[0] - height], self.fill, self.padding_mode)
        i, j, h, w = self.get_params(img, self.size)
        return img[..., i:i + h, j:j + w]


class TransformedDataset(Dataset):
    """``(transform(image), target_transform(label))`` over two tensors, one sample at a time."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform=None, target_transform=None) -> None:
        self.images, self.labels = images, labels
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image, label = self.images[index], self.labels[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label


def _split(n: int, val_fraction: float, split_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, held-out)`` indices: ``torch.randperm(n)`` from a seeded generator, the last
    ``round(val_fraction * n)`` held out (``torch.utils.data.random_split``'s order)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    k = int(round(val_fraction * n))
    return perm[: n - k], perm[n - k:]


def _dataset(images: torch.Tensor, labels: torch.Tensor, transform, target_transform) -> Dataset:
    if transform is None and target_transform is None:
        return TensorDataset(images, labels)
    return TransformedDataset(images, labels, transform, target_transform)


def digits(train: bool | None = True, transform=None, target_transform=None, val_fraction: float = 0.2,
           split_seed: int = 0, normalize: bool = False) -> Dataset:
    """scikit-learn's digits as torch tensors, split with ``torch.randperm`` (see ``jax_impl.data.datasets``).

    The arrays are ``jax_impl.data.datasets.digits_arrays``'s (the same NumPy
    loading and standardisation); the split is drawn by torch itself.
    """
    images, labels = (torch.from_numpy(a) for a in digits_arrays(normalize))
    if train is not None:
        idx = _split(len(images), val_fraction, split_seed)[0 if train else 1]
        images, labels = images[idx], labels[idx]
    return _dataset(images, labels, transform, target_transform)


def synthetic(num_samples: int = 512, image_shape: Sequence[int] = (1, 8, 8), num_classes: int = 10, seed: int = 0,
              transform=None, target_transform=None) -> Dataset:
    """Prototype-plus-noise images drawn with torch's generator (see ``jax_impl.data.datasets.synthetic``)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(int(s) for s in image_shape)
    protos = torch.rand((num_classes, *shape), generator=g)
    labels = torch.randint(0, num_classes, (num_samples,), generator=g)
    noise = torch.rand((num_samples, *shape), generator=g)
    images = 0.5 * protos[labels] + 0.5 * noise
    return _dataset(images, labels, transform, target_transform)


def build_dataset(dataset_config, *, train: bool | None = None, val_fraction: float = 0.2,
                  split_seed: int = 0, transform: Callable | None = None) -> Dataset:
    """The data set a config's ``data.dataset`` section names (``digits`` or ``synthetic``)."""
    kwargs: dict[str, Any] = dataset_config.resolved_kwargs()
    if dataset_config.name == "digits":
        return digits(train, transform, val_fraction=val_fraction, split_seed=split_seed, **kwargs)
    if dataset_config.name == "synthetic":
        full = synthetic(**kwargs, transform=transform)
        if train is None:
            return full
        return Subset(full, _split(len(full), val_fraction, split_seed)[0 if train else 1].tolist())
    raise KeyError(f"unknown dataset {dataset_config.name!r}")


def build_dataloader(data_config, dataset: Dataset, *, seed: int, train: bool = True) -> DataLoader:
    """The real ``torch.utils.data.DataLoader`` a config's ``data:`` section describes.

    The shuffle order comes from ``torch.Generator().manual_seed(seed)``
    (``train.seed``), which ``jax_impl``'s loader reproduces. Workers start
    as ``jax_impl``'s do (forkserver, not torch's ``fork``): the process runs
    JAX beside torch, and a fork of its threads can deadlock. The start
    method changes neither the batches nor the workers' seeds.
    """
    from jax_impl.data import default_worker_context

    batch = data_config.batch_size if train else (data_config.eval_batch_size or data_config.batch_size)
    workers = data_config.num_workers
    return DataLoader(
        dataset, batch_size=batch, shuffle=data_config.shuffle and train,
        drop_last=data_config.drop_last and train, num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
        multiprocessing_context=default_worker_context() if workers > 0 else None,
    )
