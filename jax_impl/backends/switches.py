"""A module-level switch set for the length of a ``with`` block, as ``torch.backends.*.flags`` set theirs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any

__all__ = ["set_within"]


@contextlib.contextmanager
def set_within(namespace: MutableMapping[str, Any], name: str, value: Any) -> Iterator[None]:
    """Set ``namespace[name]`` (a module's ``globals()``) to ``value`` until the block ends, then restore it.

    A module's ``flags`` takes parameters named as torch's, the same names
    as the module attributes they set, so it passes ``globals()`` here.
    """
    previous = namespace[name]
    namespace[name] = value
    try:
        yield
    finally:
        namespace[name] = previous
