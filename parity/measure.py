"""What every run measures, once: the lr columns, the step whose losses part, an epoch's distances and accuracies.

The single-device runner (:mod:`parity.runner`) and the data-parallel one
(:mod:`parity.parallel_runner`) produce their states differently (live
models; rank 0's snapshots) and hand them here, so that a report means the
same thing whichever produced it:

* a step's losses differ when ``|jax - torch| > atol + rtol * |torch|``;
* a tensor's distance is ``max |jax - torch| / max |torch|``
  (:func:`parity.compare.scaled_error`), the epoch's worst parameter decides;
* accuracy is the share of held-out samples whose ``argmax`` is the label,
  agreement the share on which both sides predict the same class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from parity.compare import compare, scaled_error
from parity.report import EpochRecord

__all__ = ["accuracies", "first_divergent_step", "input_array", "losses_differ", "lr_fields", "measure_states"]


def lr_fields(lrs: Sequence[float]) -> dict[str, Any]:
    """A record's learning-rate fields: ``lr`` is group 0's (torch's ``param_groups[0]["lr"]``), ``lrs`` every
    group's when there are several."""
    return {"lr": float(lrs[0])} | ({"lrs": [float(v) for v in lrs]} if len(lrs) > 1 else {})


def losses_differ(torch_loss: float | None, jax_loss: float | None, tol: Any) -> bool:
    """Whether a step's losses differ beyond ``tol`` (``atol + rtol * |torch|``); ``False`` if a side is missing."""
    if torch_loss is None or jax_loss is None:
        return False
    return abs(torch_loss - jax_loss) > tol.atol + tol.rtol * abs(torch_loss)


def first_divergent_step(steps: Sequence[Mapping[str, Any]], tol: Any) -> int | None:
    """The first step record whose losses differ beyond ``tol`` (:func:`losses_differ`), or ``None``."""
    for record in steps:
        if losses_differ(record.get("torch_loss"), record.get("jax_loss"), tol):
            return int(record["step"])
    return None


def input_array(batch: Any, fdtype: Any) -> np.ndarray:
    """A batch's inputs for the JAX side as NumPy in the run's float dtype; integer inputs (token ids) stay
    integers (the counterpart of :func:`parity.torch_step.model_input`)."""
    array = np.asarray(batch)
    return array.astype(fdtype) if np.issubdtype(array.dtype, np.floating) else array


def measure_states(rec: EpochRecord, theirs: Mapping[str, np.ndarray], ours: Mapping[str, np.ndarray], *,
                   params: Sequence[str], buffers: Sequence[str] = (), floor: Mapping[str, float] | None = None,
                   tol: Any) -> None:
    """Fill ``rec``'s distances between torch's state (``theirs``) and JAX's (``ours``) after an epoch.

    Args:
      rec: the epoch's record; its parameter, buffer, floor and per-tensor fields are set.
      theirs, ours: name -> array, torch's ``state_dict`` names on both sides.
      params: the parameter names (``named_parameters()`` order): they decide the verdict.
      buffers: the BatchNorm running statistics to report beside them.
      floor: torch's own float32-vs-float64 distance per tensor (:mod:`parity.floor`), or nothing.
      tol: ``train.tolerance`` (``rtol``, ``atol``, ``max_ulp``).
    """
    floor = floor or {}
    result = compare({k: theirs[k] for k in params}, {k: ours[k] for k in params}, rtol=tol.rtol, atol=tol.atol,
                     max_ulp=tol.max_ulp, check_dtype=False)
    scaled = {k: scaled_error(ours[k], theirs[k]) for k in params}
    rec.worst_leaf = max(scaled, key=scaled.get)
    rec.param_max_rel, rec.param_max_abs, rec.param_max_ulp = scaled[rec.worst_leaf], result.max_abs, result.max_ulp
    floor_params = {k: floor[k] for k in params if k in floor}
    if floor_params:
        rec.floor_worst = max(floor_params, key=floor_params.get)
        rec.floor_max_rel = floor_params[rec.floor_worst]
    if buffers:
        scaled_b = {k: scaled_error(ours[k], theirs[k]) for k in buffers}
        rec.buffer_max_rel = max(scaled_b.values())
        scaled.update(scaled_b)
    rec.leaves = {k: [scaled[k], floor.get(k, math.nan)] for k in scaled}


def accuracies(labels: np.ndarray, torch_pred: np.ndarray | None,
               jax_pred: np.ndarray | None) -> tuple[float, float, float]:
    """``(torch accuracy, JAX accuracy, agreement)`` of held-out predictions; ``NaN`` for a side that did not
    run or an empty split."""
    labels = np.asarray(labels)

    def accuracy(pred: np.ndarray | None) -> float:
        return float((pred == labels).mean()) if pred is not None and len(labels) else math.nan

    both = torch_pred is not None and jax_pred is not None and len(labels)
    return accuracy(torch_pred), accuracy(jax_pred), float((torch_pred == jax_pred).mean()) if both else math.nan
