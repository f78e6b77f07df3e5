"""The float32 verdict on two loops' records, grouped as ``parity.compare_runs`` groups a recording's names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.examples.histories import relative


def floor_ratios(run: list[dict[str, Any]], reference: list[dict[str, Any]],
                 floor_run: list[dict[str, Any]], *,
                 spread: Sequence[list[dict[str, Any]]] = ()) -> dict[tuple[int, str], float]:
    """``(step, name) -> distance / group floor`` of ``run`` from ``reference`` (torch's float32 run), with the
    floor from ``floor_run`` (its float64 twin) taken per group as ``parity.compare_runs`` takes it: a step's
    tensors against the largest floor among that step's tensors, scalars against the largest scalar floor at
    that step or before (one name's floor alone can be near zero by chance: a loss that lands on float64's
    value says nothing about float32's precision).

    Args:
      run: the candidate's records (the JAX loop's), one dict per step.
      reference: torch's float32 records; the distances are measured from them.
      floor_run: torch's float64 twin of ``reference`` (the same float32 draws).
      spread: other torch float32 runs of the same loop on other code paths of torch (an MKL branch, an
        ATen capability): a name's floor is the largest distance of ``reference`` or any of these from
        ``floor_run``, torch's float32 precision over its code paths rather than one path's rounding.
    """
    ratios: dict[tuple[int, str], float] = {}
    scalar_floor = 0.0
    for step, (ours, theirs, floor) in enumerate(zip(run, reference, floor_run, strict=True)):
        others = [other[step] for other in spread]
        distances = {name: relative(ours[name], theirs[name]) for name in theirs}
        floors = {name: max(relative(torch32[name], floor[name]) for torch32 in (theirs, *others))
                  for name in theirs}
        tensors = [name for name in theirs if np.ndim(theirs[name]) > 0]
        scalars = [name for name in theirs if np.ndim(theirs[name]) == 0]
        scalar_floor = max([scalar_floor, *(floors[n] for n in scalars)])
        tensor_floor = max((floors[n] for n in tensors), default=0.0)
        for names, group in ((tensors, tensor_floor), (scalars, scalar_floor)):
            for name in names:
                d = distances[name]
                ratios[step, name] = d / group if group > 0 else (0.0 if d == 0 else np.inf)
    return ratios
