"""The DataLoader worker process: torch's ``_utils/worker.py`` (seeding, ``WorkerInfo``, the task loop).

Also torch's ``ExceptionWrapper`` (``torch/_utils.py``), which carries a
worker's exception to the main process.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import random
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_impl.data import generator as _generator
from jax_impl.data._fetch import DatasetKind, create_fetcher
from jax_impl.data._shared_memory import ExportedDataset, ResultSender

__all__ = [
    "MP_STATUS_CHECK_INTERVAL",
    "ExceptionWrapper",
    "IterableDatasetStopIteration",
    "ManagerWatchdog",
    "ResumeIteration",
    "WorkerInfo",
    "generate_state",
    "get_worker_info",
    "worker_loop",
]

# torch/utils/data/_utils/__init__.py: how long a blocked worker or join waits between liveness checks.
MP_STATUS_CHECK_INTERVAL = 5.0
# Seconds an orphaned worker's main thread gets to stop after the interrupt before the process exits anyway.
_ORPHAN_EXIT_GRACE = 1.0
# Seconds between checks of the loader's process where pidfd_open is unavailable.
_MANAGER_POLL_INTERVAL = 0.5


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
class IterableDatasetStopIteration:
    """Sent by a worker whose ``IterableDataset`` iterator is exhausted (torch's ``_IterableDatasetStopIteration``)."""

    worker_id: int


@dataclass(frozen=True)
class ResumeIteration:
    """Tells a persistent worker to start a new epoch; echoed back as its acknowledgement."""

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
            msg = _KeyErrorMessage(msg)  # KeyError repr()s its argument; keep the text readable.
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


def generate_state(base_seed: int, worker_id: int) -> list[int]:
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


class ManagerWatchdog:
    """torch's ``ManagerWatchdog``, watching the loader's process itself rather than the worker's parent.

    torch's watchdog compares ``os.getppid()`` with its value at start, which
    under ``fork`` is the loader's process. Under ``forkserver`` the parent is
    the fork server, and the server outlives a killed loader for as long as
    any worker lives (multiprocessing hands each child the server's liveness
    pipe), so that check never fires. This one holds a pidfd of the loader's
    process (readable once it exits), else polls ``os.kill(pid, 0)``.

    Args:
        manager_pid: the loader's process id.
    """

    def __init__(self, manager_pid: int) -> None:
        self.manager_pid = manager_pid
        self.manager_dead = False
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(manager_pid)
        except ProcessLookupError:
            self.manager_dead = True
        except (AttributeError, OSError):  # pragma: no cover - no pidfd_open (non-Linux, Linux < 5.3)
            pass

    def _dead_within(self, timeout: float | None) -> bool:
        if self._pidfd is not None:
            poller = select.poll()  # Not select(): a descriptor above 1023 is fine.
            poller.register(self._pidfd, select.POLLIN)
            return bool(poller.poll(None if timeout is None else timeout * 1000))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                os.kill(self.manager_pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # pragma: no cover - a process we may not signal: alive
                pass
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_MANAGER_POLL_INTERVAL)

    def is_alive(self) -> bool:
        """Whether the loader's process still runs (does not block)."""
        if not self.manager_dead:
            self.manager_dead = self._dead_within(0)
        return not self.manager_dead

    def stop_worker_when_manager_dies(self) -> None:
        """Starts a daemon thread that ends this worker soon after the loader's process exits.

        The thread interrupts the main thread as Ctrl-C would (the task loop
        then returns, as torch's does once its watchdog fires), and ends the
        process after :data:`_ORPHAN_EXIT_GRACE` seconds if it still runs (a
        worker stuck in a dataset's code). A worker's shared memory is
        anonymous, so an abrupt exit leaves nothing behind.
        """

        def watch() -> None:
            self.manager_dead = self._dead_within(None)
            with contextlib.suppress(OSError):  # The main thread may be gone already (the worker is exiting).
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(_ORPHAN_EXIT_GRACE)
            os._exit(1)

        threading.Thread(target=watch, name="jax_impl_data_worker_watchdog", daemon=True).start()


def worker_loop(
    dataset_kind: int,
    dataset: Any,
    conn: multiprocessing.connection.Connection,
    done: Any,
    auto_collation: bool,
    collate_fn: Callable,
    drop_last: bool,
    base_seed: int,
    init_fn: Callable[[int], None] | None,
    worker_id: int,
    num_workers: int,
    manager_pid: int,
) -> None:
    """torch's ``_worker_loop``: seed, build the fetcher, then answer ``(idx, indices, released)`` tasks until ``None``.

    ``dataset`` is the dataset itself under ``fork``, else an
    :class:`ExportedDataset`. Tasks arrive over ``conn``, the Unix socket the
    results go back over (``None``, or the socket's end, stops the worker);
    ``released`` lists the result slots the main process no longer uses.
    ``done`` is the shared stop flag (torch's ``done_event``): set, the tasks
    still queued are skipped.
    """
    global _worker_info
    where = f"in DataLoader worker process {worker_id}"
    sender = ResultSender(conn, manager_pid, lambda msg: (msg[0], ExceptionWrapper(where=where)))
    watchdog = ManagerWatchdog(manager_pid)
    try:
        watchdog.stop_worker_when_manager_dies()
        seed = base_seed + worker_id
        random.seed(seed)
        _generator.manual_seed(seed)
        np.random.seed(generate_state(base_seed, worker_id))

        init_exception = None
        fetcher = None
        try:
            if isinstance(dataset, ExportedDataset):
                dataset = dataset.load()
            _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
        except Exception:  # noqa: BLE001 - re-raised in the main process at the first batch, as torch.
            init_exception = ExceptionWrapper(where=where)

        iteration_end = False
        while watchdog.is_alive():
            if not conn.poll(MP_STATUS_CHECK_INTERVAL):
                continue
            r = conn.recv()  # EOFError once the main process has shut the socket: the loop ends below.
            if isinstance(r, ResumeIteration):
                sender.send((r, None))
                iteration_end = False
                if init_exception is None:
                    fetcher = create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
                continue
            if r is None:
                break
            idx, index, released = r
            sender.release(released)  # Even for a task that is skipped below.
            if done.value or iteration_end:
                continue
            data: Any
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception as e:  # noqa: BLE001 - shipped to the main process (ExceptionWrapper).
                    if isinstance(e, StopIteration) and dataset_kind == DatasetKind.Iterable:
                        data = IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        data = ExceptionWrapper(where=where)
            sender.send((idx, data))
            del data, idx, index, r
    except (KeyboardInterrupt, EOFError, BrokenPipeError, ConnectionResetError):
        pass  # Interrupted (Ctrl-C, or the loader's process died), or the main process shut our socket.
    finally:
        sender.close()
