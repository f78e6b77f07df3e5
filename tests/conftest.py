import os

import jax_impl  # noqa: F401  (first: sets XLA:CPU flags before jax's backend starts, see jax_impl/_xla_cpu.py)

from hypothesis import settings

pytest_plugins = ["pytester"]

# CI draws the same hypothesis examples on every run (derandomize): a landing
# never depends on luck. Locally each run explores new examples.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
