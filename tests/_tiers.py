"""Splitting a parametrized grid between the default tier and the slow tier (docs/testing.md).

The default tier runs one case of every claim; the rest of a grid runs in the slow tier, which CI runs as
well. A grid value is kept in the default tier when it is in ``keep``; every other value becomes a
``pytest.param`` marked slow, with the id it would have had.
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
    out = []
    for index, value in enumerate(values):
        case_id = None if ids is None else ids[index]
        if kept(value):
            out.append(value if case_id is None else pytest.param(*(value if several else (value,)), id=case_id))
        else:
            out.append(pytest.param(*(value if several else (value,)), id=case_id,
                                    marks=pytest.mark.slow))
    return out

