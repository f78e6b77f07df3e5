"""glibc malloc thresholds that let a train step reuse its memory instead of faulting it in every step.

XLA:CPU allocates a step's activations and temporaries when the step runs
and frees them when it ends. glibc serves blocks above its mmap threshold
(128 KiB, raised only as far as blocks freed so far) with a fresh ``mmap``
and returns them to the kernel on free, so every step faults every page of
them in again, zeroed by the kernel: measured on a 2-core host, ~10,000
page faults per step of the PyTorch MNIST example's network at batch 64,
about a quarter of its step time. With the mmap and trim thresholds at
1 GiB, blocks up to that size come from the heap and stay there, and a
step reuses what the previous one freed. torch's steps in the same process
gain too (its CPU allocator is glibc's malloc).

The thresholds hold for glibc's main arena. A thread's first allocation
may open another arena, whose heaps are at most 64 MiB and are shrunk as
blocks are freed, and XLA's and oneDNN's worker threads allocate a step's
buffers on whichever thread runs the op: the same step then faulted in 5
pages or 10,000 from one process to the next. One arena for every thread
(``M_ARENA_MAX = 1``) keeps them all in the heap; a step makes a few dozen
allocations, so the lock they share costs nothing measurable.

The cost is memory: up to the thresholds, memory freed stays with the
process rather than going back to the kernel. ``JAX_IMPL_MALLOC_TUNING=0``
keeps glibc's defaults, and a process that set malloc's thresholds itself
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_ARENA_MAX`` or their ``glibc.malloc`` tunables) keeps its own.
Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["THRESHOLD", "tune_malloc"]

THRESHOLD = 1 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # malloc.h
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")
# The same settings as tunables; others (glibc.malloc.hugetlb, which parity bench sets) leave ours alone.
_USER_TUNABLES = tuple(f"glibc.malloc.{name}" for name in ("mmap_threshold", "trim_threshold", "top_pad", "arena_max"))


def tune_malloc() -> bool:
    """Raise glibc's mmap and trim thresholds to :data:`THRESHOLD` and keep one arena; True if set.

    Skipped (False) off glibc, with ``JAX_IMPL_MALLOC_TUNING=0``, or when
    the environment already sets malloc's thresholds.
    """
    if os.environ.get("JAX_IMPL_MALLOC_TUNING", "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in os.environ for name in _USER_SETTINGS) or any(name in tunables for name in _USER_TUNABLES):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # pragma: no cover - glibc always has it
        return False
    # Trim first: glibc's trim threshold must stay above the blocks it keeps.
    return (bool(libc.mallopt(_M_TRIM_THRESHOLD, THRESHOLD)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, THRESHOLD))
            and bool(libc.mallopt(_M_ARENA_MAX, 1)))
