"""The bridge between torch and JAX: conversion, comparison, the runner and the CLI.

``parity`` is the only package that imports both frameworks (``torch_ref`` is
the torch side, ``jax_impl`` the JAX side and never imports torch).
"""

from parity.compare import ComparisonReport, LeafReport, assert_parity, compare
from parity.numerics import seed_everything, strict_numerics

__version__ = "0.1.0"


def __getattr__(name: str):
    # run_experiment imports torch, jax and the runner: loaded on first use, so `import parity` stays light.
    if name == "run_experiment":
        from parity.experiment import run_experiment

        return run_experiment
    if name == "port":
        # A callable package: parity.port(model, example_input) ports, parity.port.check_port(...) checks.
        import parity.port

        return parity.port
    if name in ("Recorder", "optimizer_record"):
        from parity import recorder

        return getattr(recorder, name)
    if name == "compare_runs":
        from parity.compare_recordings import compare_runs

        return compare_runs
    raise AttributeError(f"module 'parity' has no attribute {name!r}")

__all__ = [
    "ComparisonReport",
    "LeafReport",
    "Recorder",
    "__version__",
    "assert_parity",
    "compare",
    "compare_runs",
    "optimizer_record",
    "port",
    "run_experiment",
    "seed_everything",
    "strict_numerics",
]
