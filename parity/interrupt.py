"""Ctrl-C and SIGTERM during `parity run`, taken at safe points.

A KeyboardInterrupt raised wherever the signal lands can land inside
jaxlib's initialisation or an XLA callback, where it aborts the process
(a C++ ``terminate``, a segfault) or is swallowed. While :func:`deferred` is
active the first SIGINT/SIGTERM is only recorded, and :func:`check`, called
between phases and between training steps, raises ``KeyboardInterrupt``
there. A second signal raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["check", "deferred"]

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
