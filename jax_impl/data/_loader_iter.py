"""The DataLoader's iterators: one epoch in the main process or over worker processes (torch's ``_*DataLoaderIter``).

``DataLoader.__iter__`` builds them; see ``jax_impl/data/dataloader.py`` for
what they reproduce of torch and where they differ.
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing.connection
import os
import signal
import time
import warnings
from typing import Any

from jax_impl.data import generator as _generator
from jax_impl.data._fetch import DatasetKind, create_fetcher
from jax_impl.data._mp_context import default_context
from jax_impl.data._shared_memory import ExportPool, ResultReceiver, SharedFile, close_export, export_dataset
from jax_impl.data._task_sender import TaskSender, stop_flag
from jax_impl.data._worker import (
    MP_STATUS_CHECK_INTERVAL,
    ExceptionWrapper,
    IterableDatasetStopIteration,
    ResumeIteration,
    worker_loop,
)

__all__ = ["BaseDataLoaderIter", "MultiProcessingDataLoaderIter", "SingleProcessDataLoaderIter"]

# Seconds the workers get, together, to exit after shutdown is signalled before they are terminated.
_SHUTDOWN_GRACE = 1.0

# torch's _utils.python_exit_status: set by atexit before multiprocessing's own exit handler runs
# (atexit runs handlers in reverse order of registration), so that __del__ during interpreter
# shutdown does nothing and multiprocessing terminates the daemonic workers instead.
_python_exit_status = False


def _set_python_exit_flag() -> None:
    global _python_exit_status
    _python_exit_status = True


atexit.register(_set_python_exit_flag)


class BaseDataLoaderIter:
    def __init__(self, loader: Any) -> None:
        self._dataset = loader.dataset
        self._dataset_kind = loader._dataset_kind
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        if loader.pin_memory:
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used.",
                stacklevel=3,
            )
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        # torch's order: iter(sampler) first (lazy: no draw yet), then base_seed, then the sampler's draws.
        self._sampler_iter = iter(self._index_sampler)
        gen = (
            loader.generator
            if loader.generator is not None
            else _generator.default_generator
        )
        self._base_seed = int(gen.random_int64())
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def __iter__(self) -> BaseDataLoaderIter:
        return self

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def _next_index(self) -> Any:
        return next(self._sampler_iter)

    def _next_data(self) -> Any:
        raise NotImplementedError

    def __next__(self) -> Any:
        data = self._next_data()
        self._num_yielded += 1
        if (
            self._dataset_kind == DatasetKind.Iterable
            and self._IterableDataset_len_called is not None
            and self._num_yielded > self._IterableDataset_len_called
        ):
            warn_msg = (
                f"Length of IterableDataset {self._dataset} was reported to be {self._IterableDataset_len_called}"
                f"(when accessing len(dataloader)), but {self._num_yielded} samples have been fetched. "
            )
            if self._num_workers > 0:
                warn_msg += (
                    "For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
                )
            warnings.warn(warn_msg, stacklevel=2)
        return data

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self) -> None:
        raise NotImplementedError(f"{self.__class__.__name__} cannot be pickled")


class SingleProcessDataLoaderIter(BaseDataLoaderIter):
    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        self._dataset_fetcher = create_fetcher(
            self._dataset_kind,
            self._dataset,
            self._auto_collation,
            self._collate_fn,
            self._drop_last,
        )

    def _next_data(self) -> Any:
        index = self._next_index()
        return self._dataset_fetcher.fetch(index)


class MultiProcessingDataLoaderIter(BaseDataLoaderIter):
    """torch's worker scheduler: round-robin task queues, a reorder buffer, bounded prefetch."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        if self._prefetch_factor is None or self._prefetch_factor <= 0:
            raise AssertionError(
                "prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter"
            )
        ctx = loader.multiprocessing_context or default_context()
        self._shutdown = False
        self._export_pool: ExportPool = loader._export_pool
        self._export_file: SharedFile | None = None
        self._workers: list[Any] = []
        self._receivers: list[ResultReceiver | None] = []
        self._tasks: TaskSender | None = None

        if ctx.get_start_method() == "fork":
            dataset: Any = self._dataset
        else:
            dataset, self._export_file = export_dataset(self._dataset, self._export_pool)

        # Nothing shared with the workers has a name in /dev/shm (jax_impl/data/_task_sender.py).
        self._workers_done = stop_flag(ctx)
        try:
            for i in range(self._num_workers):
                # A Unix socket: tasks go to the worker, results (and their slots' descriptors) come back.
                reader, writer = ctx.Pipe(duplex=True)
                w = ctx.Process(
                    target=worker_loop,
                    args=(
                        self._dataset_kind,
                        dataset,
                        writer,
                        self._workers_done,
                        self._auto_collation,
                        self._collate_fn,
                        self._drop_last,
                        self._base_seed,
                        loader.worker_init_fn,
                        i,
                        self._num_workers,
                        os.getpid(),
                    ),
                    name=f"jax_impl_data_worker_{i}",
                )
                w.daemon = True
                self._receivers.append(ResultReceiver(reader))
                w.start()
                writer.close()  # The worker holds the only other end: EOF on ours means it died.
                self._workers.append(w)
            self._tasks = TaskSender([r.conn for r in self._receivers])
        except BaseException:
            self._shutdown_workers()
            raise
        self._reset(loader, first_iter=True)

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info: dict[int, tuple] = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._workers_num_tasks = [0] * self._num_workers
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            # Persistent workers: tell each to rebuild its fetcher, dropping results of an abandoned epoch.
            for worker_id in range(self._num_workers):
                self._tasks.put(worker_id, ResumeIteration())
            resume_iteration_cnt = self._num_workers
            while resume_iteration_cnt > 0:
                return_idx, _ = self._get_data()
                if isinstance(return_idx, ResumeIteration):
                    resume_iteration_cnt -= 1
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _worker_failure(self, worker_id: int) -> RuntimeError:
        w = self._workers[worker_id]
        w.join(timeout=1.0)
        code = w.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how += f" (killed by signal {signal.Signals(-code).name})"
            except ValueError:
                pass
        self._workers_status[worker_id] = False
        self._shutdown_workers()
        return RuntimeError(
            f"DataLoader worker {worker_id} (pid(s) {w.pid}) exited unexpectedly with {how}"
        )

    def _try_get_data(self, timeout: float) -> tuple[bool, Any]:
        """Waits up to ``timeout`` s for any worker's next message; raises if an active worker died."""
        conns = {r.conn: i for i, r in enumerate(self._receivers) if r is not None}
        sentinels = {
            self._workers[i].sentinel: i
            for i in range(self._num_workers)
            if self._workers_status[i]
        }
        ready = multiprocessing.connection.wait([*conns, *sentinels], timeout)
        dead = []
        for obj in ready:
            if obj in conns:
                worker_id = conns[obj]
                receiver = self._receivers[worker_id]
                try:
                    return True, receiver.recv()
                except (EOFError, OSError):
                    receiver.close()
                    self._receivers[worker_id] = None
                    if self._workers_status[worker_id]:
                        dead.append(worker_id)
            else:
                worker_id = sentinels[obj]
                receiver = self._receivers[worker_id]
                # Exited with nothing left to read.
                if receiver is None or not receiver.conn.poll():
                    dead.append(worker_id)
        if dead:
            raise self._worker_failure(dead[0])
        return False, None

    def _get_data(self) -> Any:
        if self._timeout > 0:
            deadline = time.monotonic() + self._timeout
            while (remaining := deadline - time.monotonic()) > 0:
                success, data = self._try_get_data(remaining)
                if success:
                    return data
            raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
        while True:
            success, data = self._try_get_data(MP_STATUS_CHECK_INTERVAL)
            if success:
                return data

    def _next_data(self) -> Any:
        while True:
            # Skip tasks of workers that ended (IterableDataset) without producing data.
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx, None)
                if info:
                    worker_id = info[0]
                    if len(info) == 2 or self._workers_status[worker_id]:
                        break
                    del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration

            if len(self._task_info[self._rcvd_idx]) == 2:
                worker_id, data = self._task_info.pop(self._rcvd_idx)
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

            if self._shutdown or self._tasks_outstanding <= 0:
                raise AssertionError(
                    "Invalid iterator state: shutdown or no outstanding tasks when fetching next data"
                )
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if self._dataset_kind == DatasetKind.Iterable and isinstance(
                data, IterableDatasetStopIteration
            ):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue

            if idx != self._rcvd_idx:
                if not self._in_order:
                    worker_id = self._task_info.pop(idx)[0]
                    return self._process_data(data, worker_id)
                self._task_info[idx] += (
                    data,
                )  # Out of order: keep it in the reorder buffer.
            else:
                worker_id = self._task_info.pop(idx)[0]
                self._rcvd_idx += 1
                return self._process_data(data, worker_id)

    def _try_put_index(self) -> None:
        max_tasks = self._prefetch_factor * self._num_workers
        if self._tasks_outstanding >= max_tasks:
            raise AssertionError(
                "Number of outstanding tasks exceeded maximum allowed tasks"
            )
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # The next active worker, round-robin.
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx] and (
                self._in_order
                or self._workers_num_tasks[worker_queue_idx]
                < max_tasks // sum(self._workers_status)
            ):
                break
        else:
            return
        receiver = self._receivers[worker_queue_idx]
        released = receiver.take_released() if receiver is not None else []
        self._tasks.put(worker_queue_idx, (self._send_idx, index, released))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._workers_num_tasks[worker_queue_idx] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        self._workers_num_tasks[worker_idx] -= 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def _mark_worker_as_unavailable(self, worker_id: int) -> None:
        self._tasks.put(worker_id, None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self) -> None:
        """Stops the workers: the stop flag, ``None`` to each, the end of their sockets, join (1 s in all), then
        terminate."""
        if _python_exit_status or self._shutdown:
            return
        self._shutdown = True
        try:
            self._workers_done.value = True
            if self._tasks is not None:
                for worker_id in range(len(self._workers)):
                    if self._persistent_workers or self._workers_status[worker_id]:
                        self._mark_worker_as_unavailable(worker_id)
            # One deadline for all workers (torch waits up to 5 s each): a worker still busy in
            # __getitem__ after it is terminated, which loses nothing but a batch no one will read.
            deadline = time.monotonic() + _SHUTDOWN_GRACE
            # The sockets shut: a worker blocked writing a batch we will never read gets EPIPE and exits; one
            # waiting for a task reads the ``None`` or EOF.
            if self._tasks is not None:
                self._tasks.close(max(0.0, deadline - time.monotonic()))
            else:
                for receiver in self._receivers:
                    if receiver is not None:
                        receiver.conn.close()
            for w in self._workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            for w in self._workers:
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=MP_STATUS_CHECK_INTERVAL)
            for i, receiver in enumerate(self._receivers):
                if receiver is not None:
                    receiver.close()
                    self._receivers[i] = None
            # A worker that outlived terminate() may still map the export file: never reuse it.
            alive = any(w.is_alive() for w in self._workers)
            close_export(self._export_file, None if alive else self._export_pool)
            self._export_file = None

    def __del__(self) -> None:
        try:
            self._shutdown_workers()
        except Exception:  # noqa: BLE001, S110 - __del__ must not raise (e.g. during interpreter teardown).
            pass
