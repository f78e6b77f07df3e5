"""Comparing two recorded runs of an example loop: per-step dicts of scalars and numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np


def relative(a: Any, b: Any) -> float:
    """``max |a - b| / max |b|``: the distance of ``a`` from ``b`` relative to ``b``'s scale (0 when equal)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if diff == 0.0:
        return 0.0
    return diff / max(float(np.max(np.abs(b))), np.finfo(np.float64).tiny)


def distances(run: list[dict[str, Any]], reference: list[dict[str, Any]]) -> dict[str, float]:
    """The largest :func:`relative` distance of each recorded name over all steps; the runs must have the
    same steps and names at each step."""
    assert len(run) == len(reference), (len(run), len(reference))
    worst: dict[str, float] = {}
    for step, (ours, theirs) in enumerate(zip(run, reference)):
        assert ours.keys() == theirs.keys(), (step, sorted(ours.keys() ^ theirs.keys()))
        for name in theirs:
            worst[name] = max(worst.get(name, 0.0), relative(ours[name], theirs[name]))
    return worst


def worst(run: list[dict[str, Any]], reference: list[dict[str, Any]]) -> tuple[str, float]:
    """``(name, distance)`` of the largest :func:`distances` entry."""
    name, value = max(distances(run, reference).items(), key=lambda item: item[1])
    return name, value
