"""The CPU's maker and feature flags, which decide the kernels torch (ATen, MKL) runs on it."""

from __future__ import annotations

import functools
import subprocess
import sys

__all__ = ["cpu_flags", "cpu_vendor"]


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags, lower case: ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS; empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    if sys.platform == "darwin":
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"],
                             capture_output=True, text=True, check=False).stdout
        return frozenset(flag.lower().replace("avx2.0", "avx2") for flag in out.split())
    return frozenset()


@functools.cache
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
