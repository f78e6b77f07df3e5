"""The CPU the tests run on, where torch's results depend on it (MKL takes other kernels on CPUs not made by Intel)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def cpu_vendor() -> str:
    """``/proc/cpuinfo``'s ``vendor_id`` (``GenuineIntel``, ``AuthenticAMD``, ...), or ``""`` where it is unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""
