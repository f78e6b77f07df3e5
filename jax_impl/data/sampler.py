"""``torch.utils.data`` samplers with torch's index streams, drawn without torch.

Each sampler reproduces ``torch/utils/data/sampler.py`` line for line, with
:class:`jax_impl.random.Generator` in place of ``torch.Generator``,
so the same seed gives the same indices in the same order, epoch after epoch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Generic, TypeVar

import numpy as np

from jax_impl import random as _random
from jax_impl.random import Generator

_T_co = TypeVar("_T_co", covariant=True)


class Sampler(Generic[_T_co]):
    """Base class: an iterable of dataset indices (or of index lists)."""

    def __init__(self, data_source: Sized | None = None) -> None:
        del data_source  # torch ignores it too (kept for signature parity)

    def __iter__(self) -> Iterator[_T_co]:
        raise NotImplementedError


class SequentialSampler(Sampler[int]):
    """``range(len(data_source))``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """torch's ``RandomSampler``: same permutations from the same generator.

    Per ``__iter__`` (lazily, at the first ``next``):

    * ``generator is None``: ``seed = random64() % 2**63`` from the global
      :data:`~jax_impl.random.default_generator`, then a fresh
      ``Generator().manual_seed(seed)``;
    * without replacement: ``num_samples // n`` full ``randperm(n)``, then one
      more ``randperm(n)`` sliced to ``num_samples % n``. That trailing
      ``randperm`` is drawn even when the slice is empty, so one epoch with
      ``num_samples == n`` consumes two permutations of an explicit generator;
    * with replacement: ``randint(0, n, (32,))`` chunks ``num_samples // 32``
      times, then one chunk of ``num_samples % 32``.

    Args:
        data_source: sized dataset.
        replacement: draw with replacement.
        num_samples: number of indices per epoch (default ``len(data_source)``).
        generator: a :class:`Generator`, or ``None`` for the global stream.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Generator | None = None,
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(
                "replacement should be a boolean value, but got "
                f"replacement={self.replacement}"
            )
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                "num_samples should be a positive integer value, but got "
                f"num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.generator is None:
            seed = _random.default_generator.random_int64()
            generator = Generator().manual_seed(seed)
        else:
            generator = self.generator
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from generator.randint(0, n, (32,)).tolist()
            yield from generator.randint(0, n, (self.num_samples % 32,)).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from generator.randperm(n).tolist()
            yield from generator.randperm(n).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """``indices[i] for i in randperm(len(indices), generator)``.

    With ``generator=None`` the permutation comes straight from the global
    generator (no intermediate seed draw, unlike :class:`RandomSampler`).
    """

    def __init__(
        self, indices: Sequence[int], generator: Generator | None = None
    ) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        gen = (
            self.generator
            if self.generator is not None
            else _random.default_generator
        )
        for i in gen.randperm(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``torch.multinomial(weights_as_float64, num_samples, replacement, generator)``.

    Draws are exact (see :meth:`Generator.multinomial`); without replacement,
    exact ties of ``w / q`` may order differently from torch's ``topk``.
    """

    def __init__(
        self,
        weights: Sequence[float],
        num_samples: int,
        replacement: bool = True,
        generator: Generator | None = None,
    ) -> None:
        if (
            not isinstance(num_samples, int)
            or isinstance(num_samples, bool)
            or num_samples <= 0
        ):
            raise ValueError(
                "num_samples should be a positive integer value, but got "
                f"num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ValueError(  # noqa: TRY004 - torch raises ValueError
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        weights_array = np.asarray(weights, dtype=np.float64)
        if weights_array.ndim != 1:
            raise ValueError(
                "weights should be a 1d sequence but given "
                f"weights have shape {tuple(weights_array.shape)}"
            )
        self.weights = weights_array
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        gen = (
            self.generator
            if self.generator is not None
            else _random.default_generator
        )
        yield from gen.multinomial(
            self.weights, self.num_samples, self.replacement
        ).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Group a sampler's indices into lists of ``batch_size`` (torch's ``BatchSampler``).

    ``drop_last=True`` zips ``batch_size`` references to one iterator (the
    partial tail is dropped); otherwise ``islice`` chunks until one is empty.
    ``len`` is ``L // batch_size`` or ``ceil(L / batch_size)``.
    """

    def __init__(
        self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool
    ) -> None:
        if (
            not isinstance(batch_size, int)
            or isinstance(batch_size, bool)
            or batch_size <= 0
        ):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(  # noqa: TRY004 - torch raises ValueError
                f"drop_last should be a boolean value, but got drop_last={drop_last}"
            )
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        sampler_iter = iter(self.sampler)
        if self.drop_last:
            args = [sampler_iter] * self.batch_size
            for batch_droplast in zip(*args, strict=False):
                yield [*batch_droplast]
        else:
            batch = [*itertools.islice(sampler_iter, self.batch_size)]
            while batch:
                yield batch
                batch = [*itertools.islice(sampler_iter, self.batch_size)]

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size  # type: ignore[arg-type]
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size  # type: ignore[arg-type]
