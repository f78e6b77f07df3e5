"""Splitting a parametrized grid between the default tier and the slow tier (docs/testing.md).

The default tier runs one case of every claim; the rest of a grid runs in the slow tier, which CI runs as
well. Each value comes back as a ``pytest.param``, marked slow unless the default tier keeps it, with the id
it would have had.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import pytest


def slow_except(values: Iterable[Any], keep: Collection[Any] | Callable[[Any], bool], *,
                ids: Sequence[str] | None = None, several: bool = False) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``, those not kept marked ``slow``.

    Args:
        values: the grid, one value (or one tuple of values for several argument names) per case.
        keep: the values the default tier runs, as a collection or as a predicate.
        ids: the cases' ids, when ``parametrize`` would otherwise be given them.
        several: each value is a tuple spread over several argument names (``parametrize(("a", "b"), ...)``).
    """
    kept = keep if callable(keep) else (lambda value: value in keep)
    values = list(values)
    return _split(values, [kept(value) for value in values], ids, several)


def slow_after(values: Iterable[Any], count: int = 1) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``, the first ``count`` in the default tier, the rest slow."""
    values = list(values)
    return _split(values, [index < count for index in range(len(values))], None, False)


def _split(values: list[Any], kept: list[bool], ids: Sequence[str] | None, several: bool) -> list[Any]:
    return [pytest.param(*(value if several else (value,)), id=None if ids is None else ids[index],
                         marks=() if kept[index] else pytest.mark.slow)
            for index, value in enumerate(values)]
