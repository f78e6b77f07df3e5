"""``torch.utils.data`` datasets on numpy arrays, and ``random_split``.

Mirrors ``torch/utils/data/dataset.py``; ``random_split`` draws its
permutation from :class:`jax_impl.random.Generator`, so the same seed
gives the same subsets as torch.
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from jax_impl import random as _random
from jax_impl.random import Generator

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class Dataset(Generic[_T_co]):
    """Map-style dataset: implement ``__getitem__`` (and usually ``__len__``).

    Optionally ``__getitems__(indices)`` returns a whole batch at once (torch's
    ``DataLoader`` fetches with it when present).
    """

    def __getitem__(self, index: Any) -> _T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[_T_co]) -> ConcatDataset[_T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[_T_co], Iterable[_T_co]):
    """Iterable-style dataset: implement ``__iter__``."""

    def __iter__(self) -> Iterator[_T_co]:
        raise NotImplementedError(
            "Subclasses of IterableDataset should implement __iter__."
        )

    def __add__(self, other: Dataset[_T_co]) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Chain iterable datasets one after another (torch's ``ChainDataset``)."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")  # noqa: TRY004 - torch raises AssertionError
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")  # noqa: TRY004 - torch raises AssertionError
            total += len(d)  # type: ignore[arg-type]
        return total


class GatheredBatch(Sequence[tuple[np.ndarray, ...]]):
    """What :meth:`TensorDataset.__getitems__` returns: a batch gathered in one index.

    It behaves as the list of per-sample tuples torch's ``__getitems__`` would
    return (``len``, indexing, iteration give ``(a[i], b[i], ...)``), and
    carries the gathered arrays in :attr:`arrays` (``a[indices]``, ...), which
    :func:`jax_impl.data.collate.default_collate` returns directly as the list
    ``[a[indices], b[indices], ...]``: the same result as collating the
    per-sample tuples, without a Python loop over samples.
    """

    __slots__ = ("arrays",)

    def __init__(self, arrays: tuple[np.ndarray, ...]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return GatheredBatch(tuple(a[i] for a in self.arrays))
        return tuple(a[i] for a in self.arrays)


class TensorDataset(Dataset[tuple[np.ndarray, ...]]):
    """Dataset of arrays indexed along their first dimension (torch's ``TensorDataset``).

    Args:
        *arrays: numpy (or array-like) arrays with equal first dimension.
    """

    def __init__(self, *arrays: np.ndarray) -> None:
        arrays = tuple(np.asarray(a) for a in arrays)
        if any(arrays[0].shape[0] != a.shape[0] for a in arrays):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = arrays

    def __getitem__(self, index: Any) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> GatheredBatch:
        """All samples at ``indices`` as a :class:`GatheredBatch` (one fancy index per array)."""
        idx = np.asarray(indices, dtype=np.int64)
        return GatheredBatch(tuple(a[idx] for a in self.tensors))

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])


class ConcatDataset(Dataset[_T_co]):
    """Concatenation of map-style datasets (torch's ``ConcatDataset``)."""

    @staticmethod
    def cumsum(sequence: Iterable[Any]) -> list[int]:
        r, s = [], 0
        for e in sequence:
            length = len(e)
            r.append(length + s)
            s += length
        return r

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")  # noqa: TRY004 - torch raises AssertionError
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> _T_co:
        if idx < 0:
            if -idx > len(self):
                raise ValueError(
                    "absolute value of index should not exceed dataset length"
                )
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = (
            idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        )
        return self.datasets[dataset_idx][sample_idx]


class Subset(Dataset[_T_co]):
    """``dataset`` restricted to ``indices`` (torch's ``Subset``)."""

    def __init__(self, dataset: Dataset[_T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> Any:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[idx] for idx in indices])  # type: ignore[attr-defined]
        return [self.dataset[self.indices[idx]] for idx in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Dataset[_T],
    lengths: Sequence[int | float],
    generator: Generator | None = _random.default_generator,
) -> list[Subset[_T]]:
    """Split ``dataset`` into random non-overlapping subsets, as torch does.

    If ``lengths`` are fractions (``isclose(sum, 1) and sum <= 1``) each split
    gets ``floor(len * frac)`` and the remainder is handed out one by one
    round-robin from split 0. Then ``indices = randperm(sum(lengths),
    generator)`` and split k is the k-th consecutive slice.

    Args:
        dataset: dataset to split.
        lengths: lengths or fractions.
        generator: the permutation's generator (default: the global one, bound
            at import like torch's default argument).
    """
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths: list[int] = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(math.floor(len(dataset) * frac))  # type: ignore[arg-type]
        remainder = len(dataset) - sum(subset_lengths)  # type: ignore[arg-type]
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    stacklevel=2,
                )
    if sum(lengths) != len(dataset):  # type: ignore[arg-type]
        raise ValueError(
            "Sum of input lengths does not equal the length of the input dataset!"
        )
    gen = generator if generator is not None else _random.default_generator
    indices = gen.randperm(int(sum(lengths))).tolist()
    int_lengths = [int(n) for n in lengths]
    return [
        Subset(dataset, indices[offset - length : offset])
        for offset, length in zip(
            itertools.accumulate(int_lengths), int_lengths, strict=True
        )
    ]
