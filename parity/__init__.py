"""The bridge between torch and JAX: conversion, comparison, the runner and the CLI.

``parity`` is the only package that imports both frameworks (``torch_ref`` is
the torch side, ``jax_impl`` the JAX side and never imports torch).
"""

from parity.compare import ComparisonReport, LeafReport, assert_parity, compare
from parity.numerics import seed_everything, strict_numerics

__version__ = "0.1.0"

__all__ = [
    "ComparisonReport",
    "LeafReport",
    "__version__",
    "assert_parity",
    "compare",
    "seed_everything",
    "strict_numerics",
]
