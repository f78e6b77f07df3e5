"""How the main process hands tasks to its workers: over each worker's own socket, from a daemon thread.

torch sends a worker its tasks through a ``multiprocessing.Queue`` and
stops it with a ``multiprocessing.Event``. Under ``forkserver`` or
``spawn`` each of those holds POSIX semaphores that live under a name in
``/dev/shm`` until the resource tracker unlinks them, so a SIGKILL of the
whole process group (the loader's process, its fork server, its tracker
and its workers at once) leaves ``sem.mp-*`` files behind. Here a worker
reads its tasks from the Unix socket it already sends its results over
(the main-to-worker direction is otherwise unused), and the stop flag is a
byte of anonymous shared memory: nothing the loader creates has a name.

A ``Queue``'s ``put`` never blocks: its feeder thread writes. A full socket
would block a plain ``send`` (a worker busy with a batch it cannot hand
back while the main process waits to give it the next task), so
:class:`TaskSender` keeps that property with a feeder thread of its own,
writing through duplicates of the sockets' descriptors, which the main
thread may close at any time without the thread writing to a reused one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import socket
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["TaskSender", "stop_flag"]


def stop_flag(ctx: Any) -> Any:
    """A shared, unnamed boolean the main process sets at shutdown: workers skip the tasks still queued.

    ``ctx.RawValue`` lives in a ``multiprocessing.heap`` arena, a file that is unlinked as soon as it is
    created and reaches the workers as a descriptor.
    """
    return ctx.RawValue(ctypes.c_bool, False)


class TaskSender:
    """Sends each worker its tasks in order, from a daemon thread, so that :meth:`put` never blocks.

    Args:
        conns: the main process's end of each worker's socket (``Pipe(duplex=True)``); the sender writes
            through its own duplicates of their descriptors.
    """

    def __init__(self, conns: Sequence[Connection]) -> None:
        self._conns = [Connection(os.dup(c.fileno())) for c in conns]
        self._pending: queue.SimpleQueue[tuple[int, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="jax_impl_data_task_sender", daemon=True)
        self._thread.start()

    def put(self, worker_id: int, task: Any) -> None:
        """Queues ``task`` for worker ``worker_id`` (``None`` stops it); a worker that is gone drops it."""
        self._pending.put((worker_id, task))

    def _run(self) -> None:
        while (item := self._pending.get()) is not None:
            worker_id, task = item
            with contextlib.suppress(OSError):  # The worker is gone: its results' end tells the main process.
                self._conns[worker_id].send(task)

    def close(self, timeout: float) -> None:
        """Ends every worker's stream of tasks (a worker reading reads EOF after the tasks already sent, a worker
        writing gets ``EPIPE``), then stops the thread, waiting up to ``timeout`` s for it."""
        for conn in self._conns:
            with contextlib.suppress(OSError):
                _shut(conn)
        self._pending.put(None)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            for conn in self._conns:
                conn.close()


def _shut(conn: Connection) -> None:
    """Shuts the socket under ``conn`` down both ways, whichever process or thread holds it open."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()
