import atexit
import os
import shutil
import tempfile

# Two pytest-xdist workers share two cores, and each one's OpenMP team (torch's, libgomp) spins on its cores
# between parallel regions by default: on a loaded machine the spinning takes the core from the other worker's
# test. Passive waiting (a team sleeps at once) changes no result, only who gets the core. Set before torch
# or oneDNN loads libgomp, which reads it once; the workers inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Most of a test's time is XLA compiling what it runs, and many tests compile the same programs: functions
# made anew per test case trace to the same HLO, both pytest-xdist workers compile the same small operations,
# and the slow tier repeats the default tier's. One JAX persistent compilation cache for every test process of
# this checkout (both workers, both tiers, the subprocesses tests start) compiles each program once. Entries
# are keyed on the program, XLA_FLAGS, jaxlib and the devices. JAX's size limit is not used: it rescans the
# whole folder on every write, which makes a run's writes quadratic in its entries; instead the folder is
# emptied when a session starts with it over _JAX_CACHE_BYTES. A user's own cache setting stands.
_JAX_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".pytest_jax_cache")
_JAX_CACHE_BYTES = 2 << 30


def _cache_bytes(folder: str) -> int:
    with os.scandir(folder) as entries:
        return sum(entry.stat().st_size for entry in entries if entry.is_file())


if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    if os.path.isdir(_JAX_CACHE) and _cache_bytes(_JAX_CACHE) > _JAX_CACHE_BYTES:
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax_impl  # noqa: F401  (first: sets XLA:CPU flags before jax's backend starts, see jax_impl/_xla_cpu.py)

from hypothesis import settings

pytest_plugins = ["pytester"]

# CI draws the same hypothesis examples on every run (derandomize): a landing
# never depends on luck. Locally each run explores new examples.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# `parity run` keeps compiled steps in a persistent cache (parity/compile_cache.py), or in JAX's own when one
# is set (the one above). Where a test puts JAX's aside (tests/parity/test_compile_cache.py), its runs share
# one of their own, never the user's ~/.cache, and it goes when the session ends. Each pytest-xdist worker
# makes its own (a worker inherits the environment of the process that started it).
_OWNER = "PARITY_TEST_CACHE_OWNER"
if "PARITY_CACHE_DIR" not in os.environ or os.environ.get(_OWNER, str(os.getpid())) != str(os.getpid()):
    os.environ["PARITY_CACHE_DIR"] = tempfile.mkdtemp(prefix="parity-test-cache-")
    os.environ[_OWNER] = str(os.getpid())
    atexit.register(shutil.rmtree, os.environ["PARITY_CACHE_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """A ``serial`` test is skipped on a pytest-xdist worker: it cannot share the machine, and CI runs it
    alone afterwards (``python -m pytest -m serial``, docs/testing.md)."""
    import pytest

    if os.environ.get("PYTEST_XDIST_WORKER"):
        alone = pytest.mark.skip(reason="serial: runs alone, after the parallel run (python -m pytest -m serial)")
        for item in items:
            if "serial" in item.keywords:
                item.add_marker(alone)
