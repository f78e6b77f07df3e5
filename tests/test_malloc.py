"""jax_impl raises glibc's mmap and trim thresholds at import (jax_impl/_malloc.py), unless told not to."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

_PROBE = """
import ctypes
import jax_impl, jax_impl._malloc as m
print(m.tune_malloc())
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
block = libc.malloc(64 << 20)
print(libc.mallinfo2().hblkhd >= 64 << 20)  # served by its own mmap (returned to the kernel on free)
libc.free(block)
import threading
def on_a_thread():  # a thread's own arena serves no block above 64 MiB from its heap
    block = libc.malloc(80 << 20)
    print(libc.mallinfo2().hblkhd >= 80 << 20)
    libc.free(block)
thread = threading.Thread(target=on_a_thread)
thread.start()
thread.join()
"""


def _run(**env_changes: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "JAX_IMPL_MALLOC"))}
    env.pop("GLIBC_TUNABLES", None)
    env.update(env_changes)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_large_block_comes_from_the_heap_on_any_thread():
    assert _run() == ["True", "False", "False"]


def test_opt_out_and_users_own_settings_keep_glibcs_defaults():
    assert _run(JAX_IMPL_MALLOC_TUNING="0") == ["False", "True", "True"]
    assert _run(MALLOC_MMAP_THRESHOLD_="131072")[0] == "False"
    assert _run(GLIBC_TUNABLES="glibc.malloc.trim_threshold=1")[0] == "False"
    assert _run(MALLOC_ARENA_MAX="4")[0] == "False"


def test_huge_pages_keep_the_tuning():
    """``parity bench`` runs its processes with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``: not a threshold."""
    assert _run(GLIBC_TUNABLES="glibc.malloc.hugetlb=1") == ["True", "False", "False"]
