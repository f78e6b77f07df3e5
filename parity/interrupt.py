"""Ctrl-C and SIGTERM during `parity run`, taken at safe points.

A KeyboardInterrupt raised wherever the signal lands can land inside
jaxlib's initialisation or an XLA callback, where it aborts the process
(a C++ ``terminate``, a segfault) or is swallowed. While :func:`deferred` is
active the first SIGINT/SIGTERM is only recorded, and :func:`check`, called
between phases and between training steps, raises ``KeyboardInterrupt``
there. A second signal raises at once. Inside :func:`immediate` (a process
that only waits for its children, as a data-parallel run's launcher does)
every signal raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["check", "deferred", "immediate"]

_pending: list[int] = []


def _record(signum: int, frame: Any) -> None:
    if _pending:  # a second signal: the person means it now
        raise KeyboardInterrupt(f"signal {signum}")
    _pending.append(signum)


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a signal arrived since :func:`deferred` began."""
    if _pending:
        raise KeyboardInterrupt(f"signal {_pending[0]}")


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """SIGINT and SIGTERM recorded for :func:`check` inside (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _record) for s in (signal.SIGINT, signal.SIGTERM)}
    _pending.clear()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _pending.clear()


def _raise(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def immediate() -> Iterator[None]:
    """Inside :func:`deferred`: SIGINT and SIGTERM raise ``KeyboardInterrupt`` at once (a signal already
    recorded raises on entry). For code that only waits, where no XLA call can be cut in two; outside
    :func:`deferred` or off the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not _record:
        yield
        return
    check()
    previous = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
