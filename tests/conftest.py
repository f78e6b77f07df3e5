import atexit
import os
import shutil
import tempfile

# Two pytest-xdist workers share two cores, and each one's OpenMP team (torch's, libgomp) spins on its cores
# between parallel regions by default: on a loaded machine the spinning takes the core from the other worker's
# test. Passive waiting (a team sleeps at once) changes no result, only who gets the core. Set before torch
# or oneDNN loads libgomp, which reads it once; the workers inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax_impl  # noqa: F401  (first: sets XLA:CPU flags before jax's backend starts, see jax_impl/_xla_cpu.py)

from hypothesis import settings

pytest_plugins = ["pytester"]

# CI draws the same hypothesis examples on every run (derandomize): a landing
# never depends on luck. Locally each run explores new examples.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# `parity run` keeps compiled steps in a persistent cache (parity/compile_cache.py): the tests' runs share
# one of their own, never the user's ~/.cache, and it goes when the session ends. Each pytest-xdist
# worker makes its own (a worker inherits the environment of the process that started it).
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
