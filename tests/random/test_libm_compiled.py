"""jax_impl.random._libm_compiled: the C library's loops are kept in numba's on-disk cache and take any float64
vector; tests/random/test_libm_loops.py checks their draws against torch's."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from jax_impl.random import _libm_compiled  # noqa: E402 - numba present

_LOAD = """
from jax_impl.random import _libm_compiled
print(*(sum(k.stats.cache_hits.values()) for k in (_libm_compiled.log1p_of_minus, _libm_compiled.log_cos_sin)))
"""


# Slow tier: two fresh processes, each importing jax_impl and numba (about three seconds together).
@pytest.mark.slow
def test_a_second_process_loads_the_loops_from_numbas_cache(tmp_path):
    """The loops hold no address of the process that compiled them: the first process compiles them into
    numba's cache, the next loads them (no compile). Their numbers are torch's: tests/random/test_libm_loops.py."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    hits = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        hits.append(out.stdout.split())
    assert hits == [["0", "0"], ["1", "1"]]


def test_read_only_and_strided_vectors_are_taken():
    """A read-only input (a view of a JAX array) and a strided one run the same loops, with the C library's
    results bit for bit (Python's ``math`` calls the same functions)."""
    u = np.random.default_rng(0).random(61)[::3]
    u.setflags(write=False)
    out, log, cos, sin = (np.empty(u.size) for _ in range(4))
    _libm_compiled.log1p_of_minus(u, out)
    _libm_compiled.log_cos_sin(u, u, log, cos, sin)
    for function, result in ((lambda v: math.log1p(-v), out), (math.log, log), (math.cos, cos), (math.sin, sin)):
        assert result.tobytes() == np.array([function(v) for v in u.tolist()]).tobytes()
