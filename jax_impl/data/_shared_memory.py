"""Shared memory between a DataLoader and its workers: anonymous files handed over as descriptors.

Big arrays cross between the processes through shared memory instead of
pipes, in both directions:

* **Dataset export** (forkserver/spawn workers only; ``fork`` shares the
  parent's pages). The dataset is pickled once per iterator; numpy arrays of
  :data:`SHARE_MIN_BYTES` or more are copied into one shared file and each
  worker maps it copy-on-write, so a worker sees the arrays as a forked child
  would. memory-mapped arrays (``np.memmap``) are reopened from their file.
* **Results.** A worker pickles each batch with protocol 5 and writes numpy
  buffers of :data:`SLOT_MIN_BYTES` or more into a reusable slot, a shared
  file both sides keep mapped; only the small pickle goes through the
  connection (a pipe copies every byte through the kernel in 64 KiB pieces).

Every shared file is anonymous (``memfd_create``; elsewhere a file in
``/dev/shm`` unlinked as soon as it is open) and reaches the other process as
a file descriptor: over the Unix socket of a worker's result connection, or
duplicated into the worker when it starts. No shared file has a name that
outlives the processes, so the memory is freed when the last process mapping
it exits, however it exits (SIGKILL included). torch shares tensors the same
way (its default ``file_descriptor`` sharing strategy: a shared file unlinked
at once, its descriptor passed over a Unix socket).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import mmap
import multiprocessing.connection
import multiprocessing.reduction
import os
import pickle
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "SHARE_MIN_BYTES",
    "SLOT_MIN_BYTES",
    "ExportPool",
    "ExportedDataset",
    "InheritedFd",
    "ResultReceiver",
    "ResultSender",
    "SharedFile",
    "close_export",
    "create_shared_fd",
    "export_dataset",
    "region_array",
    "shared_name_prefix",
]

# Arrays at least this big are shared with forkserver/spawn workers through the export file.
SHARE_MIN_BYTES = 1 << 20
# Batches whose numpy buffers total at least this many bytes travel through a shared slot.
SLOT_MIN_BYTES = 1 << 16
# Offsets of arrays in a shared file: numpy's and SIMD loads' preferred alignment.
_ALIGN = 64

SharedFile = tuple[int, mmap.mmap]
"""A shared file in the process that made it: its descriptor and a shared, writable mapping of it."""


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def shared_name_prefix(owner_pid: int) -> str:
    """The name every shared file of the loader running in process ``owner_pid`` starts with.

    The name is what ``/proc/<pid>/fd`` and ``/proc/<pid>/maps`` show (as
    ``/memfd:<name> (deleted)``); it is never an entry in a directory for longer
    than it takes to open the file.
    """
    return f"jax_impl_dataloader_{owner_pid}_"


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def create_shared_fd(kind: str, owner_pid: int, nbytes: int, *, preallocate: bool) -> int:
    """An anonymous shared-memory file of ``nbytes``: a descriptor, and no name to remove later.

    Args:
        kind: what the file holds (``"export"``, ``"batch"``), part of its name.
        owner_pid: the loader's process, part of its name (see :func:`shared_name_prefix`).
        nbytes: the file's size.
        preallocate: allocate the pages now, so that a full memory limit is an
            ``OSError`` here rather than a ``SIGBUS`` at the first write.
    """
    name = f"{shared_name_prefix(owner_pid)}{kind}_"
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux
        fd, path = tempfile.mkstemp(prefix=name, dir=_shm_dir())
        os.unlink(path)  # Open, so the memory stays; unnamed, so nothing is left if any process dies.
    try:
        if preallocate and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, nbytes)
        else:
            os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _close_file(file: SharedFile) -> None:
    fd, mm = file
    with contextlib.suppress(BufferError):  # A batch still views it: it is unmapped when that batch goes.
        mm.close()
    with contextlib.suppress(OSError):
        os.close(fd)


class InheritedFd:
    """A file descriptor a worker receives when it starts.

    Pickled by a forkserver/spawn ``Process.start()``, the descriptor is
    duplicated into the child (multiprocessing's ``DupFd``); a forked child
    inherits the same number without pickling.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Callable, tuple]:
        return _inherit_fd, (multiprocessing.reduction.DupFd(self.fd),)


def _inherit_fd(dup: Any) -> InheritedFd:
    return InheritedFd(dup.detach())


# --------------------------------------------------------------------------- dataset export


class ExportPool:
    """The shared files a loader's big arrays were exported to, kept for the next epochs.

    Exporting to a fresh file costs page allocation and faults; copying into
    a file that is already populated costs only the copy. So an iterator takes
    a file from its loader's pool (by size), copies the arrays' *current*
    contents in (a data set changed between epochs is seen changed, as with
    ``fork``), and gives the file back once its workers have exited. Between
    epochs the pool holds one copy of the exported arrays (an iterator needs
    it during one anyway); it is freed when the loader is garbage collected.
    """

    def __init__(self) -> None:
        self._free: dict[int, list[SharedFile]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def take(self, nbytes: int) -> SharedFile:
        """A file of exactly ``nbytes``, from the pool or new."""
        with self._lock:
            files = self._free.get(nbytes)
            if files:
                return files.pop()
        fd = create_shared_fd("export", os.getpid(), nbytes, preallocate=True)
        try:
            mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        except BaseException:
            os.close(fd)
            raise
        return fd, mm

    def give_back(self, file: SharedFile) -> None:
        """Keeps ``file`` for a later iterator (closes it if the loader is gone)."""
        with self._lock:
            if not self._closed:
                self._free.setdefault(len(file[1]), []).append(file)
                return
        _close_file(file)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            files = [f for group in self._free.values() for f in group]
            self._free.clear()
        for file in files:
            _close_file(file)


def region_array(region: mmap.mmap, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An exported array in a worker: a view of its copy-on-write mapping of the export file."""
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(region, dtype=dtype, count=count, offset=offset).reshape(shape)


class _ArrayExporter(pickle.Pickler):
    """Pickles a dataset, recording where each big array goes in the export file.

    ``reducer_override`` (not ``persistent_id``) because the pickler consults
    it only for objects that are not builtin containers or scalars, and
    memoizes its result: a dataset of a million small tuples pays nothing,
    and an array held twice is exported once.
    """

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays: list[tuple[np.ndarray, int]] = []
        self.nbytes = 0

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, np.ndarray) or obj.dtype.hasobject:
            return NotImplemented
        source = _memmap_source(obj)
        if source is not None:
            reduced = _reduce_memmap(obj, source)
            if reduced is not None:
                return reduced
        elif type(obj) is not np.ndarray or obj.nbytes < SHARE_MIN_BYTES:
            return NotImplemented
        offset = self.nbytes
        self.arrays.append((obj, offset))
        self.nbytes += _aligned(obj.nbytes)
        return region_array, (offset, obj.shape, obj.dtype)


class _ExportUnpickler(pickle.Unpickler):
    """Resolves :func:`region_array` to a view of this worker's mapping of the export file."""

    def __init__(self, file: Any, region: mmap.mmap | None) -> None:
        super().__init__(file)
        self._region = region

    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name == region_array.__name__ and self._region is not None:
            return functools.partial(region_array, self._region)
        return super().find_class(module, name)


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


def _open_memmap(filename: str, dtype: np.dtype, mode: str, offset: int, shape: tuple[int, ...]) -> np.memmap:
    return np.memmap(filename, dtype=dtype, mode=mode, offset=offset, shape=shape)


class ExportedDataset:
    """A dataset on its way to forkserver/spawn workers: its pickle and the export file's descriptor."""

    def __init__(self, data: bytes, region_fd: InheritedFd | None) -> None:
        self.data = data
        self.region_fd = region_fd

    def load(self) -> Any:
        """In the worker: maps the export file copy-on-write and unpickles the dataset."""
        region = None
        if self.region_fd is not None:
            fd, self.region_fd = self.region_fd.fd, None
            try:
                # ACCESS_COPY: a worker may write to its arrays without the others (or the parent) seeing it, like fork.
                region = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            finally:
                os.close(fd)
        return _ExportUnpickler(io.BytesIO(self.data), region).load()


def export_dataset(dataset: Any, pool: ExportPool) -> tuple[ExportedDataset, SharedFile | None]:
    """The dataset for forkserver/spawn workers, and the export file to give back to ``pool`` afterwards."""
    buf = io.BytesIO()
    pickler = _ArrayExporter(buf)
    pickler.dump(dataset)
    if not pickler.arrays:
        return ExportedDataset(buf.getvalue(), None), None
    file = pool.take(pickler.nbytes)
    try:
        for array, offset in pickler.arrays:
            np.copyto(region_array(file[1], offset, array.shape, array.dtype), array)
    except BaseException:
        _close_file(file)
        raise
    return ExportedDataset(buf.getvalue(), InheritedFd(file[0])), file


def close_export(file: SharedFile | None, pool: ExportPool | None) -> None:
    """Gives an iterator's export file back to ``pool`` (``None``: closes it, a worker may still map it)."""
    if file is None:
        return
    if pool is None:
        _close_file(file)
    else:
        pool.give_back(file)


# --------------------------------------------------------------------------- results


class ResultSender:
    """Worker side of the result transport: the pickle over the connection, array bytes in slots.

    The main process hands a slot back with the worker's next task once the
    batch viewing it is garbage collected, so a worker needs about
    ``prefetch_factor + 2`` slots (more while the caller keeps batches). A new
    slot's descriptor follows its first message over the connection, a Unix
    socket.

    Args:
        conn: the worker's end of its result connection (``Pipe(duplex=True)``).
        owner_pid: the loader's process, for the slots' names.
        on_error: makes the message sent instead of a batch that cannot be pickled.
    """

    def __init__(self, conn: multiprocessing.connection.Connection, owner_pid: int,
                 on_error: Callable[[Any], Any]) -> None:
        self.conn = conn
        self.owner_pid = owner_pid
        self.on_error = on_error
        self.slots: dict[int, mmap.mmap] = {}
        self.free: set[int] = set()
        self.next_sid = 0

    def release(self, sids: Sequence[int]) -> None:
        self.free.update(sids)

    def _acquire(self, nbytes: int) -> tuple[int, int | None, list[int]]:
        fitting = [sid for sid in self.free if len(self.slots[sid]) >= nbytes]
        if fitting:
            self.free.discard(fitting[0])
            return fitting[0], None, []
        dropped = []
        if self.free:  # A free slot that is too small: replace it rather than grow the pool.
            old = self.free.pop()
            self.slots.pop(old).close()
            dropped.append(old)
        fd = create_shared_fd("batch", self.owner_pid, nbytes, preallocate=False)
        try:
            mm = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        sid = self.next_sid
        self.next_sid += 1
        self.slots[sid] = mm
        return sid, fd, dropped

    def send(self, obj: Any) -> None:
        """Sends ``obj``; an unpicklable one is replaced by ``on_error(obj)``."""
        buffers: list[pickle.PickleBuffer] = []
        try:
            payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        except Exception:  # noqa: BLE001 - reported to the main process in place of the batch.
            buffers = []
            payload = pickle.dumps(self.on_error(obj), protocol=5)
        raws = [b.raw() for b in buffers]
        spans, total = [], 0
        for raw in raws:
            spans.append((total, raw.nbytes))
            total += _aligned(raw.nbytes)
        new_fd = None
        if total < SLOT_MIN_BYTES:
            msg: tuple = (payload, None, False, [bytes(r) for r in raws], [])
        else:
            sid, new_fd, dropped = self._acquire(total)
            mm = self.slots[sid]
            for (offset, nbytes), raw in zip(spans, raws, strict=True):
                mm[offset : offset + nbytes] = raw
            msg = (payload, sid, new_fd is not None, spans, dropped)
        try:
            self.conn.send_bytes(pickle.dumps(msg, protocol=5))
            if new_fd is not None:
                multiprocessing.reduction.send_handle(self.conn, new_fd, None)
        finally:
            if new_fd is not None:
                os.close(new_fd)  # The slot stays mapped here; the main process has its own descriptor.

    def close(self) -> None:
        for mm in self.slots.values():
            mm.close()
        self.slots.clear()
        self.conn.close()


class ResultReceiver:
    """Main-process side of :class:`ResultSender` for one worker.

    A batch's arrays are views of the slot they arrived in (no copy, as
    torch's tensors live in the shared memory a worker filled); the slot goes
    back to the worker once every array of that batch has been garbage
    collected, so a batch kept by the caller is never overwritten.
    """

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self.slots: dict[int, mmap.mmap] = {}
        # Slots whose arrays are gone, sent back to the worker with its next task. A deque:
        # the finalizers that fill it may run in any thread that drops a batch.
        self.released: collections.deque[int] = collections.deque()

    def recv(self) -> Any:
        """The next object; ``EOFError``/``OSError`` once the worker is gone."""
        payload, sid, new_slot, spans, dropped = pickle.loads(self.conn.recv_bytes())
        for old in dropped:
            with contextlib.suppress(BufferError):
                self.slots.pop(old).close()
        if sid is None:
            # Writable copies, like the tensors torch hands out.
            return pickle.loads(payload, buffers=[bytearray(b) for b in spans])
        if new_slot:
            try:
                fd = multiprocessing.reduction.recv_handle(self.conn)
            except RuntimeError as e:  # The worker died between the message and the descriptor.
                raise EOFError(str(e)) from e
            try:
                self.slots[sid] = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
        whole = np.frombuffer(self.slots[sid], np.uint8)
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
        for mm in self.slots.values():
            with contextlib.suppress(BufferError):
                mm.close()
        self.slots.clear()
