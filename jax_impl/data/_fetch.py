"""Fetchers: one batch (or sample) from a dataset, as torch's ``_utils/fetch.py`` builds it.

Used by the single-process iterator and by every worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DatasetKind", "IterableDatasetFetcher", "MapDatasetFetcher", "create_fetcher"]


class DatasetKind:
    """torch's ``_DatasetKind``: how a dataset is indexed."""

    Map = 0
    Iterable = 1


class _BaseDatasetFetcher:
    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last


class MapDatasetFetcher(_BaseDatasetFetcher):
    """Fetches ``dataset[i]`` for each index of a batch (``__getitems__`` when the dataset has it)."""

    def fetch(self, possibly_batched_index: Any) -> Any:
        if self.auto_collation:
            # torch's fast path: one __getitems__ call per batch (TensorDataset gathers each field at once).
            getitems = getattr(self.dataset, "__getitems__", None)
            if getitems:
                data = getitems(possibly_batched_index)
            else:
                data = [self.dataset[idx] for idx in possibly_batched_index]
        else:
            data = self.dataset[possibly_batched_index]
        return self.collate_fn(data)


class IterableDatasetFetcher(_BaseDatasetFetcher):
    """Takes the next ``len(batch)`` items of ``iter(dataset)``; ``StopIteration`` once it is exhausted."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool) -> None:
        super().__init__(dataset, auto_collation, collate_fn, drop_last)
        self.dataset_iter = iter(dataset)
        self.ended = False

    def fetch(self, possibly_batched_index: Any) -> Any:
        if self.ended:
            raise StopIteration
        if self.auto_collation:
            data = []
            for _ in possibly_batched_index:
                try:
                    data.append(next(self.dataset_iter))
                except StopIteration:
                    self.ended = True
                    break
            if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
                raise StopIteration
        else:
            data = next(self.dataset_iter)
        return self.collate_fn(data)


def create_fetcher(kind: int, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool) -> Any:
    """torch's ``_DatasetKind.create_fetcher``."""
    cls = MapDatasetFetcher if kind == DatasetKind.Map else IterableDatasetFetcher
    return cls(dataset, auto_collation, collate_fn, drop_last)
