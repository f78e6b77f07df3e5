"""``torch.utils.data.DataLoader`` with torch's batches, RNG draws and worker seeding, without torch.

What is reproduced exactly (``torch/utils/data/dataloader.py``, ``_utils/worker.py``,
``_utils/fetch.py``, torch 2.13):

* argument validation and its messages, ``len(loader)``, the default samplers
  (``shuffle=True`` -> ``RandomSampler(dataset, generator=generator)``, else
  ``SequentialSampler``, wrapped in ``BatchSampler(sampler, batch_size, drop_last)``);
* the RNG draws of every epoch: each new iterator draws ``base_seed`` =
  ``generator.random_int64()`` (the global default generator when
  ``generator is None``) *even with* ``num_workers=0``, after ``iter(sampler)``
  but before the sampler's own (lazy) draws; with ``persistent_workers`` only
  the first epoch draws it;
* batch ``i`` is fetched by worker ``i % num_workers`` and delivered in order
  (``in_order=True``), at most ``prefetch_factor * num_workers`` tasks outstanding;
* worker seeding: ``seed = base_seed + worker_id``; ``random.seed(seed)``,
  ``jax_impl.data.generator.manual_seed(seed)`` (torch's ``torch.manual_seed``),
  ``np.random.seed(_generate_state(base_seed, worker_id))``, then
  ``worker_init_fn(worker_id)``;
* a worker's exception is re-raised in the main process as torch's
  ``ExceptionWrapper.reraise`` does (same type, message
  ``"Caught <Type> in DataLoader worker process <i>.\\nOriginal Traceback ..."``).

What differs, and why:

* **Start method.** torch uses the platform default (``fork`` on Linux with
  Python < 3.14). JAX runs XLA thread pools once a backend is initialised and
  ``fork`` of a multithreaded process can deadlock the child (JAX warns about
  it), so when ``multiprocessing_context is None`` we use ``forkserver`` (the
  Python 3.14 default on Linux) where available, else ``spawn``. The fork
  server is started once per process with this package *and the main script*
  preloaded (Python < 3.14 never preloads ``__main__`` itself), so each worker
  costs a fork of a process that has already imported everything, not an
  interpreter start plus the script's imports. A main script that creates
  the iterator outside ``if __name__ == "__main__":``, or that is read from
  stdin, cannot be imported by such children; for it the workers are forked,
  as torch's are, while JAX's backend has not started, and ``iter()`` raises
  a ``RuntimeError`` naming the fix once it has (``jax_impl/data/_mp_context.py``).
  Pass ``multiprocessing_context="fork"`` for torch's behaviour everywhere.
* **Dataset transfer.** Under ``forkserver``/``spawn`` the dataset is pickled
  to the workers. numpy arrays of 1 MiB or more are copied once per iterator
  into one shared-memory file that every worker maps copy-on-write (the same
  sharing ``fork`` gives), instead of being copied through a pipe per
  worker; the file stays with the loader, so later epochs copy into pages
  that are already allocated (``jax_impl/data/_shared_memory.py``).
* **Task transport.** torch hands each worker its tasks through a
  ``multiprocessing.Queue`` and stops it with a ``multiprocessing.Event``,
  whose semaphores have names in ``/dev/shm`` (``sem.mp-*``) that a SIGKILL
  of the whole process group leaves behind. Ours go over the worker's own
  Unix socket, written by a feeder thread so that handing out a task never
  blocks (as a ``Queue``'s ``put``), and the stop flag is unnamed shared
  memory (``jax_impl/data/_task_sender.py``): nothing has a name to leave.
* **Result transport.** Each worker has its own result connection. Batches
  are pickled with protocol 5; numpy buffers of 64 KiB or more go out-of-band
  through reusable shared-memory slots; the arrays the main process hands out
  are writable views of those slots, not copies (torch's tensors live in
  shared memory too), and a slot is reused only after its batch is garbage
  collected. Shared memory is anonymous and passed as file descriptors, as
  torch's ``file_descriptor`` strategy does, so no file in ``/dev/shm``
  outlives the processes, however they end. The main process waits on the
  connections *and* the workers' process sentinels, so a dead worker is
  reported at once (torch polls every 5 s and relies on a SIGCHLD handler).
* **Orphaned workers.** torch's workers stop when their parent process
  changes; under ``forkserver`` the parent is the fork server, which lives as
  long as the workers do. Ours watch the loader's process itself (a pidfd)
  and exit within about a second of its death by any signal; the fork server
  and multiprocessing's resource tracker then exit too.
* A worker that dies raises ``RuntimeError("DataLoader worker <i> (pid(s) <pid>)
  exited unexpectedly with exit code <c> (killed by signal <NAME>)")`` (torch:
  ``"DataLoader worker (pid(s) <pid>) exited unexpectedly"``) and the other
  workers are shut down. Shutdown gives the workers 1 s in all to exit before
  terminating them (torch: up to 5 s each).
* ``pin_memory`` has no effect (torch on a machine without an accelerator
  behaves the same and warns); use :func:`device_prefetch` to overlap the
  host-to-device copy with compute instead.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.context
import os
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jax_impl.data import generator as _generator
from jax_impl.data._fetch import DatasetKind
from jax_impl.data._loader_iter import BaseDataLoaderIter, MultiProcessingDataLoaderIter, SingleProcessDataLoaderIter
from jax_impl.data._prefetch import device_prefetch
from jax_impl.data._shared_memory import ExportPool
from jax_impl.data._worker import WorkerInfo, get_worker_info
from jax_impl.data.collate import default_collate, default_convert
from jax_impl.data.dataset import IterableDataset
from jax_impl.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "DataLoader",
    "WorkerInfo",
    "default_collate",
    "default_convert",
    "device_prefetch",
    "get_worker_info",
]


class _InfiniteConstantSampler(Sampler):
    """Yields ``None`` forever: the sampler of an ``IterableDataset`` (as torch)."""

    def __init__(self) -> None:
        pass

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None


class DataLoader:
    """Iterates over a dataset in batches exactly as ``torch.utils.data.DataLoader`` does.

    Args:
        dataset: a map-style dataset (``__getitem__``/``__len__``; ``__getitems__``
            is used when present) or an :class:`IterableDataset`.
        batch_size: samples per batch (default ``1``); ``None`` disables
            automatic batching: each sample goes through ``default_convert``.
        shuffle: reshuffle every epoch with ``RandomSampler(dataset, generator=generator)``.
            Must be unset for an ``IterableDataset``.
        sampler: an iterable of indices with ``__len__``; exclusive with ``shuffle``.
        batch_sampler: an iterable of index lists; exclusive with ``batch_size``,
            ``shuffle``, ``sampler`` and ``drop_last``.
        num_workers: worker processes (``0``: load in the main process).
        collate_fn: merges a list of samples into a batch (default
            ``default_collate``, or ``default_convert`` without auto-batching).
        pin_memory: accepted for compatibility; no effect (see :func:`device_prefetch`).
        drop_last: drop the last incomplete batch.
        timeout: if positive, seconds to wait for a batch from the workers before
            raising ``RuntimeError("DataLoader timed out after {timeout} seconds")``.
        worker_init_fn: called in each worker with its id, after seeding.
        multiprocessing_context: a start method name or context; default
            ``forkserver`` (``spawn`` where unavailable; ``fork`` for a main
            script that forkserver children cannot import): see the module docstring.
        generator: a :class:`jax_impl.data.generator.Generator` used for
            ``base_seed`` and by the default ``RandomSampler``; ``None`` uses the
            global default generator, as torch uses ``torch.default_generator``.
        prefetch_factor: batches loaded in advance per worker (default ``2``
            with workers; must be ``None`` without).
        persistent_workers: keep the workers (and their dataset copies and
            RNG states) alive between epochs; ``base_seed`` is then drawn once.
        in_order: deliver batches in sampler order (``False``: as they arrive).

    Each ``iter(loader)`` (one epoch) consumes the RNG exactly like torch:
    ``base_seed = generator.random_int64()``, then the sampler's draws.
    """

    __initialized = False

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: str
        | multiprocessing.context.BaseContext
        | None = None,
        generator: _generator.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        in_order: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
            )
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            self._dataset_kind = DatasetKind.Iterable
            if shuffle not in {False, None}:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            elif sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, but got sampler={sampler}"
                )
            elif batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = DatasetKind.Map

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
            )

        if sampler is None:
            if self._dataset_kind == DatasetKind.Iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)

        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator

        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers

        # Shared files of exported arrays, reused by the next epochs' workers (see ExportPool).
        self._export_pool = ExportPool()
        weakref.finalize(self, self._export_pool.close)
        self.__initialized = True
        self._IterableDataset_len_called: int | None = None
        self._iterator: BaseDataLoaderIter | None = None
        self.check_worker_number_rationality()

    @property
    def multiprocessing_context(self) -> multiprocessing.context.BaseContext | None:
        """The start-method context for workers (``None``: chosen at each ``iter()``, see the module docstring)."""
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, multiprocessing_context: Any) -> None:
        if multiprocessing_context is not None:
            if self.num_workers > 0:
                if isinstance(multiprocessing_context, str):
                    valid_start_methods = multiprocessing.get_all_start_methods()
                    if multiprocessing_context not in valid_start_methods:
                        raise ValueError(
                            "multiprocessing_context option "
                            f"should specify a valid start method in {valid_start_methods!r}, but got "
                            f"multiprocessing_context={multiprocessing_context!r}"
                        )
                    multiprocessing_context = multiprocessing.get_context(
                        multiprocessing_context
                    )
                if not isinstance(
                    multiprocessing_context, multiprocessing.context.BaseContext
                ):
                    raise TypeError(
                        "multiprocessing_context option should be a valid context "
                        "object or a string specifying the start method, but got "
                        f"multiprocessing_context={multiprocessing_context}"
                    )
            else:
                raise ValueError(
                    "multiprocessing_context can only be used with "
                    "multi-process loading (num_workers > 0), but got "
                    f"num_workers={self.num_workers}"
                )
        self.__multiprocessing_context = multiprocessing_context

    def __setattr__(self, attr: str, val: Any) -> None:
        if self.__initialized and attr in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{attr} attribute should not be set after {self.__class__.__name__} is initialized"
            )
        super().__setattr__(attr, val)

    def _get_iterator(self) -> BaseDataLoaderIter:
        if self.num_workers == 0:
            return SingleProcessDataLoaderIter(self)
        self.check_worker_number_rationality()
        return MultiProcessingDataLoaderIter(self)

    def __iter__(self) -> BaseDataLoaderIter:
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        """Batches per epoch: ``len(batch_sampler)``; for an IterableDataset ``len(dataset) / batch_size`` rounded."""
        if self._dataset_kind == DatasetKind.Iterable:
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = (
                    length // self.batch_size
                    if self.drop_last
                    else math.ceil(length / self.batch_size)
                )
            return length
        return len(self._index_sampler)

    def check_worker_number_rationality(self) -> None:
        """Warns, as torch, when more workers are requested than CPUs are available."""
        if not self.num_workers:
            return
        cpuset_checked = hasattr(os, "sched_getaffinity")
        max_suggest = len(os.sched_getaffinity(0)) if cpuset_checked else os.cpu_count()
        if max_suggest is None or self.num_workers > max_suggest:
            if max_suggest is not None:
                suggested = (
                    f"Our suggested max number of worker in current system is {max_suggest}"
                    f"{'' if cpuset_checked else ' (`cpuset` is not taken into account)'}, which is smaller "
                    "than what this DataLoader is going to create."
                )
            else:
                suggested = "DataLoader is not able to compute a suggested max number of worker in current system."
            warnings.warn(
                f"This DataLoader will create {self.num_workers} worker processes in total. {suggested} "
                "Please be aware that excessive worker creation might get DataLoader running slow or even freeze, "
                "lower the worker number to avoid potential slowness/freeze if necessary.",
                stacklevel=2,
            )
