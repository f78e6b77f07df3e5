"""Offline data sets: scikit-learn's bundled digits and a seeded synthetic image set.

Both are map-style :class:`~jax_impl.data.Dataset` s over NumPy arrays
(with ``__getitems__``, so the DataLoader gathers whole batches at once);
``torch_ref.data`` builds the same arrays as torch tensors.

- :func:`digits`: the 1797 8x8 images of ``sklearn.datasets.load_digits``
  (shipped with scikit-learn, no download) as float32 ``(1, 8, 8)`` in
  [0, 1] (pixel / 16) with int64 labels. ``train=True/False`` selects a fixed
  split: a permutation drawn with ``randperm(1797)`` from
  ``Generator().manual_seed(split_seed)`` (torch's ``random_split`` order);
  the last ``round(val_fraction * 1797)`` indices of it are the held-out set.
- :func:`synthetic`: ``num_classes`` prototype images, each sample its
  class's prototype plus noise, all drawn from ``Generator().manual_seed(seed)``
  in the order prototypes, labels, noise (``rand`` / ``randint``, so torch
  draws the identical arrays).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax_impl.data.dataset import Dataset, GatheredBatch
from jax_impl.random import Generator

__all__ = [
    "ArrayDataset", "build_dataloader", "build_dataset", "digits", "digits_arrays", "split_indices", "synthetic",
    "synthetic_arrays",
]


class ArrayDataset(Dataset[tuple[Any, Any]]):
    """``(image, label)`` pairs from two arrays, with optional torchvision-style transforms.

    Without transforms ``__getitems__`` gathers a batch with one indexing
    operation; with them every sample goes through the transform (random
    transforms draw per sample, in index order, as torchvision does).
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: Callable | None = None,
                 target_transform: Callable | None = None) -> None:
        if len(images) != len(labels):
            raise ValueError(f"images and labels differ in length: {len(images)} != {len(labels)}")
        self.images = images
        self.labels = labels
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, label = self.images[index], self.labels[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def __getitems__(self, indices: Sequence[int]):
        if self.transform is None and self.target_transform is None:
            idx = np.asarray(indices, dtype=np.int64)
            return GatheredBatch((self.images[idx], self.labels[idx]))
        return [self[i] for i in indices]


def digits_arrays(normalize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """All 1797 digits: images float32 ``(N, 1, 8, 8)`` in [0, 1], labels int64 ``(N,)``.

    ``normalize=True`` standardises the images with the mean and std of all
    1797 images (computed in float64, rounded to float32):
    ``(x - mean) / std`` in float32, which trains LeNet much faster.
    """
    raw, target = _load_digits()
    images = (raw.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    if normalize:
        mean = np.float32(images.astype(np.float64).mean())
        std = np.float32(images.astype(np.float64).std())
        images = (images - mean) / std
    return np.ascontiguousarray(images, dtype=np.float32), target.astype(np.int64)


@functools.cache
def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``load_digits()`` images and targets, parsed once per process (a run reads them for
    both frameworks' train and held-out splits), read-only so no caller changes the shared copy.

    ``load_digits`` is ``np.loadtxt`` of the ``digits.csv.gz`` scikit-learn ships (64 pixel columns and
    the label, float64); that file is read here directly, which gives the same arrays without importing
    scikit-learn (about a second of a run's start). ``load_digits`` itself is the fallback where the file
    is not found.
    """
    path = _bundled_digits_csv()
    if path is not None:
        with gzip.open(path, "rt") as handle:
            data = np.loadtxt(handle, delimiter=",")
        images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    else:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, target = bunch.images, bunch.target
    for array in (images, target):
        array.flags.writeable = False
    return images, target


def _bundled_digits_csv() -> str | None:
    """``sklearn/datasets/data/digits.csv.gz``, found without importing scikit-learn, or ``None``."""
    spec = importlib.util.find_spec("sklearn")
    for directory in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(directory, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            return path
    return None


def split_indices(n: int, val_fraction: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, held-out)`` indices: ``randperm(n)`` from ``Generator().manual_seed(split_seed)``, split at the end.

    This is ``torch.utils.data.random_split(range(n), [n - k, k],
    generator=torch.Generator().manual_seed(split_seed))`` with
    ``k = round(val_fraction * n)``.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    perm = Generator(split_seed).randperm(n)
    k = int(round(val_fraction * n))
    return perm[: n - k], perm[n - k:]


def digits(train: bool | None = True, transform: Callable | None = None, target_transform: Callable | None = None,
           val_fraction: float = 0.2, split_seed: int = 0, normalize: bool = False) -> ArrayDataset:
    """scikit-learn's digits: ``train=True`` the training split, ``False`` the held-out one, ``None`` all 1797."""
    images, labels = digits_arrays(normalize)
    if train is not None:
        idx = split_indices(len(images), val_fraction, split_seed)[0 if train else 1]
        images, labels = images[idx], labels[idx]
    return ArrayDataset(images, labels, transform, target_transform)


def synthetic_arrays(num_samples: int = 512, image_shape: Sequence[int] = (1, 8, 8), num_classes: int = 10,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Prototype-plus-noise images (float32, in [0, 1)) and int64 labels, torch-identical draws.

    With ``g = Generator().manual_seed(seed)`` (torch: ``torch.Generator().manual_seed(seed)``):
    ``protos = rand(num_classes, *shape)``, ``labels = randint(0, num_classes, (n,))``,
    ``noise = rand(n, *shape)``; ``image = 0.5 * protos[label] + 0.5 * noise``.
    """
    if num_samples < 1 or num_classes < 1:
        raise ValueError(f"num_samples and num_classes must be >= 1, got {num_samples}, {num_classes}")
    shape = tuple(int(s) for s in image_shape)
    g = Generator(seed)
    protos = g.rand((num_classes, *shape))
    labels = g.randint(0, num_classes, (num_samples,))
    noise = g.rand((num_samples, *shape))
    images = np.float32(0.5) * protos[labels] + np.float32(0.5) * noise
    return images.astype(np.float32), labels.astype(np.int64)


def synthetic(num_samples: int = 512, image_shape: Sequence[int] = (1, 8, 8), num_classes: int = 10, seed: int = 0,
              transform: Callable | None = None, target_transform: Callable | None = None) -> ArrayDataset:
    """The synthetic image classification set of :func:`synthetic_arrays` as a data set."""
    return ArrayDataset(*synthetic_arrays(num_samples, image_shape, num_classes, seed), transform, target_transform)


def build_dataset(dataset_config, *, train: bool | None = None, val_fraction: float = 0.2,
                  split_seed: int = 0, transform: Callable | None = None) -> Dataset:
    """The data set a config's ``data.dataset`` section names; twin of ``torch_ref.data.build_dataset``."""
    from jax_impl.data.dataset import Subset

    kwargs: dict[str, Any] = dataset_config.resolved_kwargs()
    if dataset_config.name == "digits":
        return digits(train, transform, val_fraction=val_fraction, split_seed=split_seed, **kwargs)
    if dataset_config.name == "synthetic":
        full = synthetic(**kwargs, transform=transform)
        if train is None:
            return full
        train_idx, held_out = split_indices(len(full), val_fraction, split_seed)
        return Subset(full, (train_idx if train else held_out).tolist())
    raise KeyError(f"unknown dataset {dataset_config.name!r}")


def build_dataloader(data_config, dataset: Dataset, *, seed: int, train: bool = True):
    """Our ``DataLoader`` for a config's ``data:`` section; twin of ``torch_ref.data.build_dataloader``."""
    from jax_impl.data.dataloader import DataLoader

    batch = data_config.batch_size if train else (data_config.eval_batch_size or data_config.batch_size)
    return DataLoader(
        dataset, batch_size=batch, shuffle=data_config.shuffle and train,
        drop_last=data_config.drop_last and train, num_workers=data_config.num_workers,
        generator=Generator(seed),
    )
