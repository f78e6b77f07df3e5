"""Python's and NumPy's random draws in a traced ``forward``: found, and reported, since the twin replays them.

fx runs ``forward`` once per mode; a ``random.random()`` there (a decoder's
teacher forcing, ``random.random() < ratio``) returns one number, which the
trace bakes into the twin as a constant: every call of the twin then takes
the branch that draw took, where torch's model draws again. The tracer
cannot turn such a draw into a node (its value is a Python float that
decides Python control flow), so :func:`watch` records each call made while
tracing and :func:`parity.port.trace` warns with the first call's line.
"""

from __future__ import annotations

import contextlib
import random
import traceback
from collections.abc import Iterator

import numpy as np

from parity.port.errors import user_line

__all__ = ["HostRandomWarning", "watch"]

_PYTHON = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample", "gauss",
           "normalvariate", "betavariate", "expovariate")
_NUMPY = ("rand", "randn", "random", "random_sample", "randint", "uniform", "normal", "choice", "permutation",
          "shuffle", "binomial", "beta")


class HostRandomWarning(UserWarning):
    """``forward`` drew from Python's or NumPy's global random state while ``parity.port`` traced it."""


@contextlib.contextmanager
def watch() -> Iterator[list[str]]:
    """While active, calls of ``random.<f>`` and ``numpy.random.<f>`` (module-level functions, looked up at call
    time) are recorded, as ``"random.random at path:line: code"``, in the yielded list; they still draw."""
    calls: list[str] = []
    saved = []

    def wrap(module, prefix: str, name: str) -> None:
        original = getattr(module, name, None)
        if original is None:
            return

        def recorded(*args, **kwargs):
            where = user_line("".join(traceback.format_stack()[:-1]))
            if where is not None:  # a draw in the user's code, not in torch's or this package's
                calls.append(f"{prefix}.{name} at {where}")
            return original(*args, **kwargs)

        saved.append((module, name, original))
        setattr(module, name, recorded)

    for name in _PYTHON:
        wrap(random, "random", name)
    for name in _NUMPY:
        wrap(np.random, "numpy.random", name)
    try:
        yield calls
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
