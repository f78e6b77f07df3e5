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
  server is started once per process with this module *and the main script*
  preloaded (Python < 3.14 never preloads ``__main__`` itself), so each worker
  costs a fork of a process that has already imported everything, not an
  interpreter start plus the script's imports. As with ``spawn``, the main
  script must guard its entry point with ``if __name__ == "__main__":``.
  Pass ``multiprocessing_context="fork"`` for torch's behaviour.
* **Dataset transfer.** Under ``forkserver``/``spawn`` the dataset is pickled
  to the workers. numpy arrays of 1 MiB or more are copied once per iterator
  into a file in ``/dev/shm`` and mapped copy-on-write by every worker (the
  same sharing ``fork`` gives), instead of being copied through a pipe per
  worker; the files stay with the loader, so later epochs copy into pages
  that are already allocated (see ``_ExportPool``).
* **Result transport.** Each worker has its own result pipe. Batches are
  pickled with protocol 5; numpy buffers of 64 KiB or more go out-of-band
  through reusable ``/dev/shm`` slots; the arrays the main process hands out
  are writable views of those slots, not copies (torch's tensors live in
  shared memory too), and a slot is reused only after its batch is garbage
  collected. The main
  process waits on the pipes *and* the workers' process sentinels, so a dead
  worker is reported at once (torch polls every 5 s and relies on a SIGCHLD
  handler).
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

import atexit
import collections
import contextlib
import itertools
import math
import mmap
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import pickle
import queue
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_impl.data import generator as _generator
from jax_impl.data.collate import default_collate, default_convert
from jax_impl.data.dataset import IterableDataset
from jax_impl.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

__all__ = [
    "DataLoader",
    "WorkerInfo",
    "default_collate",
    "default_convert",
    "device_prefetch",
    "get_worker_info",
]

# torch/utils/data/_utils/__init__.py: how long a blocked worker or join waits between liveness checks.
MP_STATUS_CHECK_INTERVAL = 5.0
# Arrays at least this big are shared with forkserver/spawn workers through a mapped file.
_SHARE_MIN_BYTES = 1 << 20
# Seconds the workers get, together, to exit after shutdown is signalled before they are terminated.
_SHUTDOWN_GRACE = 1.0

_python_exit_status = False


def _set_python_exit_flag() -> None:
    global _python_exit_status
    _python_exit_status = True


atexit.register(_set_python_exit_flag)


# --------------------------------------------------------------------------- worker-side state


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """Information about the current DataLoader worker process (torch's ``WorkerInfo``).

    Attributes:
        id: The current worker id, in ``[0, num_workers - 1]``.
        num_workers: Total number of workers.
        seed: The seed set for this worker: ``base_seed + id``.
        dataset: This worker's copy of the dataset object.
    """

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Returns this worker's :class:`WorkerInfo`; ``None`` in the main process (as torch).

    Use it in an ``IterableDataset.__iter__`` or a ``worker_init_fn`` to shard
    the data between workers: the loader does not shard iterable datasets.
    """
    return _worker_info


@dataclass(frozen=True)
class _IterableDatasetStopIteration:
    worker_id: int


@dataclass(frozen=True)
class _ResumeIteration:
    seed: int | None = None


class ExceptionWrapper:
    """An exception plus its formatted traceback, picklable across processes (torch's ``ExceptionWrapper``)."""

    def __init__(self, exc_info: Any = None, where: str = "in background") -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self) -> None:
        """Raises the wrapped exception type with the worker's traceback text as its message."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(
                msg
            )  # KeyError repr()s its argument; keep the text readable.
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=msg)
        try:
            exception = self.exc_type(msg)
        except Exception:  # noqa: BLE001 - any constructor failure: torch falls back to RuntimeError.
            raise RuntimeError(msg) from None
        raise exception


class _KeyErrorMessage(str):
    __slots__ = ()

    def __repr__(self) -> str:
        return self


def _generate_state(base_seed: int, worker_id: int) -> list[int]:
    """numpy's seed for a worker: torch's copy of numpy's SeedSequence mixing (``_utils/worker.py``)."""
    init_a, mult_a = 0x43B0D7E5, 0x931E8875
    init_b, mult_b = 0x8B51F9DD, 0x58F38DED
    mix_mult_l, mix_mult_r = 0xCA01F9DD, 0x4973F715
    xshift = 4 * 8 // 2
    mask32 = 0xFFFFFFFF

    entropy = [worker_id, base_seed & mask32, base_seed >> 32, 0]
    pool = [0] * 4
    hash_const_a = init_a

    def hash_(value: int) -> int:
        nonlocal hash_const_a
        value = (value ^ hash_const_a) & mask32
        hash_const_a = (hash_const_a * mult_a) & mask32
        value = (value * hash_const_a) & mask32
        return (value ^ (value >> xshift)) & mask32

    def mix(x: int, y: int) -> int:
        result = ((mix_mult_l * x) & mask32) - ((mix_mult_r * y) & mask32)
        result &= mask32
        return (result ^ (result >> xshift)) & mask32

    for i in range(len(pool)):
        pool[i] = hash_(entropy[i])
    for i_src in range(len(pool)):
        for i_dst in range(len(pool)):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hash_(pool[i_src]))

    hash_const_b = init_b
    state = []
    for i_dst in range(4):
        data_val = (pool[i_dst] ^ hash_const_b) & mask32
        hash_const_b = (hash_const_b * mult_b) & mask32
        data_val = (data_val * hash_const_b) & mask32
        state.append((data_val ^ (data_val >> xshift)) & mask32)
    return state


# --------------------------------------------------------------------------- fetchers (torch _utils/fetch.py)


class _DatasetKind:
    Map = 0
    Iterable = 1


class _MapDatasetFetcher:
    def __init__(
        self, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool
    ) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last

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


class _IterableDatasetFetcher:
    def __init__(
        self, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool
    ) -> None:
        self.dataset_iter = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
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
            if len(data) == 0 or (
                self.drop_last and len(data) < len(possibly_batched_index)
            ):
                raise StopIteration
        else:
            data = next(self.dataset_iter)
        return self.collate_fn(data)


def _create_fetcher(
    kind: int, dataset: Any, auto_collation: bool, collate_fn: Callable, drop_last: bool
) -> Any:
    cls = _MapDatasetFetcher if kind == _DatasetKind.Map else _IterableDatasetFetcher
    return cls(dataset, auto_collation, collate_fn, drop_last)


class _InfiniteConstantSampler(Sampler):
    """Yields ``None`` forever: the sampler of an ``IterableDataset`` (as torch)."""

    def __init__(self) -> None:
        pass

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None


# --------------------------------------------------------------------------- transport


class _ExportPool:
    """The shared files a loader's big arrays were exported to, kept mapped for the next epochs.

    Exporting a big array to a fresh file costs page allocation and faults
    (about 0.15 s for 188 MB here); copying into a file that is still mapped
    costs only the copy (0.02 s). So an iterator takes files from its loader's
    pool (by size), copies the arrays' *current* contents in (a data set
    changed between epochs is seen changed, as with ``fork``), and gives the
    files back once its workers have exited. The pool holds one copy of the
    exported arrays in ``/dev/shm`` between epochs (an iterator needs it
    during one anyway); it is unlinked when the loader is garbage collected.
    """

    def __init__(self) -> None:
        self._free: dict[int, list[tuple[str, mmap.mmap]]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def take(self, nbytes: int) -> tuple[str, mmap.mmap]:
        """A file of exactly ``nbytes`` and the parent's shared, writable mapping of it."""
        with self._lock:
            files = self._free.get(nbytes)
            if files:
                return files.pop()
        fd, path = tempfile.mkstemp(prefix="jax_impl_dataloader_", dir=_shm_dir())
        try:
            # fallocate, not ftruncate: a full tmpfs is an OSError here, not a SIGBUS at the copy.
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, nbytes)
            else:  # pragma: no cover - non-Linux
                os.ftruncate(fd, nbytes)
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mm = mmap.mmap(fd, nbytes, flags=flags)
        except BaseException:
            _unlink_all([path])
            raise
        finally:
            os.close(fd)
        return path, mm

    def give_back(self, files: Sequence[tuple[str, mmap.mmap]]) -> None:
        with self._lock:
            if not self._closed:  # The loader is gone (an iterator outlived it): nothing to reuse.
                for path, mm in files:
                    self._free.setdefault(len(mm), []).append((path, mm))
                return
        _close_files(files)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            files = [f for group in self._free.values() for f in group]
            self._free.clear()
        _close_files(files)


def _close_files(files: Sequence[tuple[str, mmap.mmap]]) -> None:
    for path, mm in files:
        with contextlib.suppress(BufferError):
            mm.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


class _ArrayFilePickler(pickle.Pickler):
    """Pickles a dataset for forkserver/spawn workers, writing big numpy arrays to mapped files."""

    def __init__(
        self, file: Any, pool: _ExportPool, files: list[tuple[str, mmap.mmap]]
    ) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pool = pool
        self._files = files

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, np.ndarray) or obj.dtype.hasobject:
            return NotImplemented
        source = _memmap_source(obj)
        if source is not None:
            reduced = _reduce_memmap(obj, source)
            if reduced is not None:
                return reduced
        elif type(obj) is not np.ndarray or obj.nbytes < _SHARE_MIN_BYTES:
            return NotImplemented
        path, mm = self._pool.take(obj.nbytes)
        self._files.append((path, mm))
        target = np.frombuffer(mm, dtype=obj.dtype).reshape(obj.shape)
        np.copyto(target, obj)
        del target  # No buffer of the mapping may outlive this call (the pool closes it).
        return _map_array_file, (path, obj.shape, obj.dtype)


def _memmap_source(obj: np.ndarray) -> np.memmap | None:
    """The ``np.memmap`` whose mapping ``obj`` views (itself, a slice, ``np.asarray`` of one)."""
    while isinstance(obj, np.ndarray):
        if isinstance(obj, np.memmap) and obj._mmap is not None:
            return obj
        obj = obj.base
    return None


def _reduce_memmap(obj: np.ndarray, source: np.memmap) -> tuple | None:
    """A C-contiguous view of a memmap reopens its file in the worker, as fork would share it.

    numpy pickles a memmap as a full in-memory copy, which for a memory-mapped
    data set (e.g. a token file) would read the whole file into every worker.
    """
    base = source._mmap
    if not source.filename or not obj.flags.c_contiguous:
        return None
    mapped_from = source.offset - source.offset % mmap.ALLOCATIONGRANULARITY
    try:
        base_address = np.frombuffer(base, np.uint8).ctypes.data
    except (TypeError, ValueError):
        return None
    file_offset = mapped_from + obj.ctypes.data - base_address
    mode = "r+" if source.mode == "w+" else source.mode  # "w+" would truncate the file.
    return _open_memmap, (source.filename, obj.dtype, mode, file_offset, obj.shape)


def _open_memmap(
    filename: str, dtype: np.dtype, mode: str, offset: int, shape: tuple[int, ...]
) -> np.memmap:
    return np.memmap(filename, dtype=dtype, mode=mode, offset=offset, shape=shape)


def _shm_dir() -> str | None:
    return (
        "/dev/shm"
        if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
        else None
    )


def _map_array_file(path: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    # ACCESS_COPY: a worker may write to its copy without the others (or the parent) seeing it, like fork.
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return np.frombuffer(mm, dtype=dtype).reshape(shape)


def _export_dataset(
    dataset: Any, pool: _ExportPool | None = None
) -> tuple[bytes, list[tuple[str, mmap.mmap]]]:
    """The dataset's pickle for forkserver/spawn workers, and the shared files it refers to."""
    import io

    pool = pool if pool is not None else _ExportPool()
    files: list[tuple[str, mmap.mmap]] = []
    buf = io.BytesIO()
    try:
        _ArrayFilePickler(buf, pool, files).dump(dataset)
    except BaseException:
        _close_files(files)
        raise
    return buf.getvalue(), files


def _release_files(files: list[tuple[str, mmap.mmap]], receivers: list[Any]) -> None:
    """Unlinks exported arrays and batch slots (an iterator's finalizer, if shutdown never ran)."""
    _close_files(files)
    files.clear()
    for i, receiver in enumerate(receivers):
        if receiver is not None:
            receiver.close()
            receivers[i] = None


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    paths.clear()


# Batches whose numpy buffers total at least this many bytes travel through a shared slot.
_SLOT_MIN_BYTES = 1 << 16
_ALIGN = 64


class _ResultSender:
    """Worker side of the result transport: a pipe for pickles, reusable shared files for array bytes.

    Pipes are slow for big batches (every byte is copied through the kernel in
    64 KiB pieces), so the out-of-band numpy buffers of a batch (pickle
    protocol 5) are written into a slot, a file in ``/dev/shm`` that both sides
    keep mapped, and only the small pickle goes through the pipe. The main
    process hands the slot back with the worker's next task once the batch
    viewing it is garbage collected, so a worker needs about
    ``prefetch_factor + 2`` slots (more while the caller keeps batches).
    """

    def __init__(
        self, conn: multiprocessing.connection.Connection, worker_id: int
    ) -> None:
        self.conn = conn
        self.worker_id = worker_id
        self.slots: dict[int, tuple[str, mmap.mmap]] = {}
        self.free: set[int] = set()
        self.next_sid = 0

    def release(self, sids: Sequence[int]) -> None:
        self.free.update(sids)

    def _acquire(self, nbytes: int) -> tuple[int, str | None, list[int]]:
        fitting = [sid for sid in self.free if len(self.slots[sid][1]) >= nbytes]
        if fitting:
            sid = fitting[0]
            self.free.discard(sid)
            return sid, None, []
        dropped = []
        if (
            self.free
        ):  # A free slot that is too small: replace it rather than grow the pool.
            old = self.free.pop()
            self._drop(old)
            dropped.append(old)
        fd, path = tempfile.mkstemp(prefix="jax_impl_dataloader_batch_", dir=_shm_dir())
        try:
            os.ftruncate(fd, nbytes)
            mm = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        sid = self.next_sid
        self.next_sid += 1
        self.slots[sid] = (path, mm)
        return sid, path, dropped

    def _drop(self, sid: int) -> None:
        path, mm = self.slots.pop(sid)
        mm.close()
        with contextlib.suppress(OSError):
            os.unlink(path)

    def send(self, obj: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        try:
            payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        except Exception:  # noqa: BLE001 - an unpicklable batch is reported as the worker's error.
            buffers = []
            where = f"in DataLoader worker process {self.worker_id}"
            payload = pickle.dumps((obj[0], ExceptionWrapper(where=where)), protocol=5)
        raws = [b.raw() for b in buffers]
        spans, total = [], 0
        for raw in raws:
            spans.append((total, raw.nbytes))
            total += -(-raw.nbytes // _ALIGN) * _ALIGN
        if total < _SLOT_MIN_BYTES:
            msg: tuple = (payload, None, None, [bytes(r) for r in raws], [])
        else:
            sid, path, dropped = self._acquire(total)
            mm = self.slots[sid][1]
            for (offset, nbytes), raw in zip(spans, raws, strict=True):
                mm[offset : offset + nbytes] = raw
            msg = (payload, sid, path, spans, dropped)
        self.conn.send_bytes(pickle.dumps(msg, protocol=5))

    def close(self) -> None:
        for sid in list(self.slots):
            self._drop(sid)
        self.conn.close()


class _ResultReceiver:
    """Main-process side of :class:`_ResultSender` for one worker.

    A batch's arrays are views of the slot they arrived in (no copy, as
    torch's tensors live in the shared memory a worker filled); the slot goes
    back to the worker once every array of that batch has been garbage
    collected, so a batch kept by the caller is never overwritten.
    """

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self.slots: dict[int, tuple[str, mmap.mmap]] = {}
        # Slots whose arrays are gone, sent back to the worker with its next task. A deque:
        # the finalizers that fill it may run in any thread that drops a batch.
        self.released: collections.deque[int] = collections.deque()

    def recv(self) -> Any:
        payload, sid, path, spans, dropped = pickle.loads(self.conn.recv_bytes())
        for old in dropped:
            _close_files([self.slots.pop(old)])
        if sid is None:
            # Writable copies, like the tensors torch hands out.
            return pickle.loads(payload, buffers=[bytearray(b) for b in spans])
        if path is not None:
            with open(path, "r+b") as f:
                self.slots[sid] = (path, mmap.mmap(f.fileno(), 0))
        mm = self.slots[sid][1]
        whole = np.frombuffer(mm, np.uint8)
        # Fires when the last array viewing this slot is gone (each view keeps `whole` alive).
        weakref.finalize(whole, self.released.append, sid)
        buffers = [whole[offset : offset + nbytes] for offset, nbytes in spans]
        del whole
        return pickle.loads(payload, buffers=buffers)

    def take_released(self) -> list[int]:
        released = []
        with contextlib.suppress(IndexError):
            while True:
                released.append(self.released.popleft())
        return released

    def close(self) -> None:
        self.conn.close()
        # A slot still viewed by a batch the caller holds stays mapped until that batch goes.
        _close_files(list(self.slots.values()))
        self.slots.clear()


# --------------------------------------------------------------------------- worker process


def _worker_loop(
    dataset_kind: int,
    dataset_payload: tuple[bool, Any],
    index_queue: Any,
    result_conn: multiprocessing.connection.Connection,
    done_event: Any,
    auto_collation: bool,
    collate_fn: Callable,
    drop_last: bool,
    base_seed: int,
    init_fn: Callable[[int], None] | None,
    worker_id: int,
    num_workers: int,
) -> None:
    """torch's ``_worker_loop``: seed, build the fetcher, then answer ``(idx, indices)`` tasks until ``None``."""
    global _worker_info
    sender = _ResultSender(result_conn, worker_id)
    try:
        seed = base_seed + worker_id
        random.seed(seed)
        _generator.manual_seed(seed)
        np.random.seed(_generate_state(base_seed, worker_id))

        init_exception = None
        fetcher = None
        try:
            exported, dataset = dataset_payload
            if exported:
                dataset = pickle.loads(dataset)
            _worker_info = WorkerInfo(
                id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset
            )
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _create_fetcher(
                dataset_kind, dataset, auto_collation, collate_fn, drop_last
            )
        except Exception:  # noqa: BLE001 - re-raised in the main process at the first batch, as torch.
            init_exception = ExceptionWrapper(
                where=f"in DataLoader worker process {worker_id}"
            )

        iteration_end = False
        # torch's ManagerWatchdog: stop when our parent goes away.
        manager_pid = os.getppid()
        while os.getppid() == manager_pid:
            try:
                r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):
                sender.send((r, None))
                iteration_end = False
                if init_exception is None:
                    fetcher = _create_fetcher(
                        dataset_kind, dataset, auto_collation, collate_fn, drop_last
                    )
                continue
            if r is None:
                break
            idx, index, released = r
            sender.release(released)  # Even for a task that is skipped below.
            if done_event.is_set() or iteration_end:
                continue
            data: Any
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception as e:  # noqa: BLE001 - shipped to the main process (ExceptionWrapper).
                    if (
                        isinstance(e, StopIteration)
                        and dataset_kind == _DatasetKind.Iterable
                    ):
                        data = _IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        data = ExceptionWrapper(
                            where=f"in DataLoader worker process {worker_id}"
                        )
            sender.send((idx, data))
            del data, idx, index, r
    except (KeyboardInterrupt, BrokenPipeError, ConnectionResetError):
        pass  # Interrupted, or the main process closed our pipe while shutting down.
    finally:
        sender.close()


# --------------------------------------------------------------------------- multiprocessing context

_preload_lock = threading.Lock()
_preload_set = False


_FORKSERVER_MAIN_ENV = "JAX_IMPL_DATALOADER_FORKSERVER_MAIN"


def _default_mp_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` (this module and the main script preloaded in the server), else ``spawn``."""
    global _preload_set
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    with _preload_lock:
        if not _preload_set:
            _preload_set = True
            from multiprocessing import forkserver, spawn

            # Preloading only takes effect if the server has not started yet; keep the user's list.
            current = list(
                getattr(forkserver._forkserver, "_preload_modules", ["__main__"])
            )
            if __name__ not in current:
                ctx.set_forkserver_preload([*current, __name__])
            # Before Python 3.14 the server never preloads __main__ (it looks for a "main_path"
            # key that get_preparation_data does not produce), so every worker re-runs the
            # user's script and its imports: seconds per worker and epoch with torch or jax.
            # Our module, imported in the server, runs it there once instead (see
            # _prepare_main_in_forkserver); forked workers then find it already imported.
            data = spawn.get_preparation_data("ignore")
            main = {k: v for k, v in data.items() if k.startswith("init_main_from_")}
            if main:
                os.environ[_FORKSERVER_MAIN_ENV] = repr(main)
                try:
                    forkserver.ensure_running()
                finally:
                    os.environ.pop(_FORKSERVER_MAIN_ENV, None)
    return ctx


def _prepare_main_in_forkserver() -> None:
    """In the fork server only: import the main script as ``__mp_main__``, as a spawned child would."""
    spec = os.environ.pop(_FORKSERVER_MAIN_ENV, None)
    if spec is None:
        return
    import ast
    from multiprocessing import process, spawn

    process.current_process()._inheriting = True
    try:
        spawn.prepare(ast.literal_eval(spec))
    except BaseException:  # noqa: BLE001, S110 - keep the server alive; workers then import it.
        pass
    finally:
        del process.current_process()._inheriting


_prepare_main_in_forkserver()


# --------------------------------------------------------------------------- DataLoader


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
            ``forkserver`` (``spawn`` where unavailable), not ``fork``: see the module docstring.
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
            self._dataset_kind = _DatasetKind.Iterable
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
            self._dataset_kind = _DatasetKind.Map

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
            if self._dataset_kind == _DatasetKind.Iterable:
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

        # Shared files of exported arrays, reused by the next epochs' workers (see _ExportPool).
        self._export_pool = _ExportPool()
        weakref.finalize(self, self._export_pool.close)
        self.__initialized = True
        self._IterableDataset_len_called: int | None = None
        self._iterator: _BaseDataLoaderIter | None = None
        self.check_worker_number_rationality()

    @property
    def multiprocessing_context(self) -> multiprocessing.context.BaseContext | None:
        """The start-method context for workers (``None``: forkserver, else spawn)."""
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

    def _get_iterator(self) -> _BaseDataLoaderIter:
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self) -> _BaseDataLoaderIter:
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
        if self._dataset_kind == _DatasetKind.Iterable:
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


class _BaseDataLoaderIter:
    def __init__(self, loader: DataLoader) -> None:
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

    def __iter__(self) -> _BaseDataLoaderIter:
        return self

    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
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
            self._dataset_kind == _DatasetKind.Iterable
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


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        if self._timeout != 0:
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        self._dataset_fetcher = _create_fetcher(
            self._dataset_kind,
            self._dataset,
            self._auto_collation,
            self._collate_fn,
            self._drop_last,
        )

    def _next_data(self) -> Any:
        index = self._next_index()
        return self._dataset_fetcher.fetch(index)


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """torch's worker scheduler: round-robin task queues, a reorder buffer, bounded prefetch."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        if self._prefetch_factor is None or self._prefetch_factor <= 0:
            raise AssertionError(
                "prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter"
            )
        ctx = loader.multiprocessing_context or _default_mp_context()
        self._shutdown = False
        self._shared_files: list[tuple[str, mmap.mmap]] = []
        self._export_pool: _ExportPool = loader._export_pool
        self._workers: list[Any] = []
        self._index_queues: list[Any] = []
        self._receivers: list[_ResultReceiver | None] = []
        # weakref.finalize so that files and processes go even if __del__ never runs.
        self._finalizer = weakref.finalize(
            self, _release_files, self._shared_files, self._receivers
        )

        if ctx.get_start_method() == "fork":
            payload: tuple[bool, Any] = (False, self._dataset)
        else:
            data, files = _export_dataset(self._dataset, self._export_pool)
            self._shared_files.extend(files)
            payload = (True, data)

        self._workers_done_event = ctx.Event()
        try:
            for i in range(self._num_workers):
                index_queue = ctx.Queue()
                index_queue.cancel_join_thread()
                reader, writer = ctx.Pipe(duplex=False)
                w = ctx.Process(
                    target=_worker_loop,
                    args=(
                        self._dataset_kind,
                        payload,
                        index_queue,
                        writer,
                        self._workers_done_event,
                        self._auto_collation,
                        self._collate_fn,
                        self._drop_last,
                        self._base_seed,
                        loader.worker_init_fn,
                        i,
                        self._num_workers,
                    ),
                    name=f"jax_impl_data_worker_{i}",
                )
                w.daemon = True
                self._index_queues.append(index_queue)
                self._receivers.append(_ResultReceiver(reader))
                w.start()
                writer.close()  # The worker holds the only write end: EOF on our side means it died.
                self._workers.append(w)
        except BaseException:
            self._shutdown_workers()
            raise
        self._reset(loader, first_iter=True)

    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
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
            for q in self._index_queues:
                q.put(_ResumeIteration())
            resume_iteration_cnt = self._num_workers
            while resume_iteration_cnt > 0:
                return_idx, _ = self._get_data()
                if isinstance(return_idx, _ResumeIteration):
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
            if self._dataset_kind == _DatasetKind.Iterable and isinstance(
                data, _IterableDatasetStopIteration
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
        self._index_queues[worker_queue_idx].put((self._send_idx, index, released))
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

    def _mark_worker_as_unavailable(
        self, worker_id: int, shutdown: bool = False
    ) -> None:
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self) -> None:
        """Stops the workers: ``None`` to each, close our pipe ends, join (1 s in all), then terminate."""
        if _python_exit_status or self._shutdown:
            return
        self._shutdown = True
        try:
            self._workers_done_event.set()
            for worker_id in range(len(self._workers)):
                if self._persistent_workers or self._workers_status[worker_id]:
                    self._mark_worker_as_unavailable(worker_id, shutdown=True)
            # A worker blocked writing a batch we will never read gets EPIPE and exits.
            for receiver in self._receivers:
                if receiver is not None:
                    receiver.conn.close()
            # One deadline for all workers (torch waits up to 5 s each): a worker still busy in
            # __getitem__ after it is terminated, which loses nothing but a batch no one will read.
            deadline = time.monotonic() + _SHUTDOWN_GRACE
            for w in self._workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
            for q in self._index_queues:
                q.cancel_join_thread()
                q.close()
        finally:
            for w in self._workers:
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=MP_STATUS_CHECK_INTERVAL)
            for i, receiver in enumerate(self._receivers):
                if receiver is not None:
                    receiver.close()
                    self._receivers[i] = None
            if any(w.is_alive() for w in self._workers):
                _close_files(self._shared_files)  # Still mapped by a worker: never reused.
            else:
                self._export_pool.give_back(self._shared_files)
            self._shared_files.clear()

    def __del__(self) -> None:
        try:
            self._shutdown_workers()
        except Exception:  # noqa: BLE001, S110 - __del__ must not raise (e.g. during interpreter teardown).
            pass


# --------------------------------------------------------------------------- device prefetch


class _PrefetchError:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


def device_prefetch(
    iterable: Iterable[Any],
    size: int = 2,
    sharding: Any = None,
    devices: Sequence[Any] | None = None,
) -> Iterator[Any]:
    """Moves each batch (a pytree of numpy arrays) to device, keeping ``size`` batches in flight.

    A background thread pulls batches from ``iterable`` and ``jax.device_put``s
    them while the caller computes on earlier ones; exceptions raised by the
    iterable (or by the transfer) are re-raised in the caller at the batch
    where they happened. Leaving the loop early stops the thread.

    Args:
        iterable: the batches, e.g. a :class:`DataLoader`.
        size: how many transferred batches may wait ahead of the caller (>= 1).
        sharding: a ``jax.sharding.Sharding`` for every leaf, e.g.
            ``NamedSharding(mesh, P("data"))`` to split the leading (batch)
            axis over devices. Default: the default device.
        devices: for ``pmap``: reshape every leaf to
            ``(len(devices), batch // len(devices), ...)`` and put slice ``i`` on
            ``devices[i]``. Exclusive with ``sharding``.

    Yields:
        The batches, as ``jax.Array`` pytrees, in order.
    """
    if size < 1:
        raise ValueError(f"size should be at least 1, but got size={size}")
    if sharding is not None and devices is not None:
        raise ValueError("sharding and devices are mutually exclusive")
    import jax

    if devices is not None:
        devices = list(devices)
        mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
        pmap_sharding = jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec("devices")
        )
        n = len(devices)

        def split(x: Any) -> Any:
            x = np.asarray(x)
            if x.ndim == 0 or x.shape[0] % n:
                raise ValueError(
                    f"a leaf of shape {x.shape} cannot be split over {n} devices along axis 0"
                )
            return jax.device_put(
                x.reshape(n, x.shape[0] // n, *x.shape[1:]), pmap_sharding
            )

        def put(batch: Any) -> Any:
            return jax.tree.map(split, batch)
    elif sharding is not None:

        def put(batch: Any) -> Any:
            return jax.device_put(batch, sharding)
    else:

        def put(batch: Any) -> Any:
            return jax.device_put(batch)

    buffer: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in iterable:
                if not offer(put(batch)):
                    return
        except BaseException as e:  # noqa: BLE001 - delivered to the consumer and raised there.
            offer(_PrefetchError(e))
            return
        offer(_END)

    thread = threading.Thread(
        target=produce, name="jax_impl_device_prefetch", daemon=True
    )
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, _PrefetchError):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=MP_STATUS_CHECK_INTERVAL)
