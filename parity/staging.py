"""Each side's whole epochs of a data-parallel run, on disk while the run lasts.

A data-parallel run trains its sides one after the other in child processes
(torch's DDP ranks, torch's float64 twin, the JAX processes), each of which
returns its record only when it finishes. So that an interrupted or crashed
run keeps what it did, as a single-device run does, rank 0 / replica 0 of
each side writes one file per whole epoch as it completes it
(:func:`write_epoch`): the losses so far, group 0's learning rates, the
seconds per epoch and the state to resume from (model ``state_dict`` and
optimizer state, as tensors). From those files :func:`read_staged` rebuilds
the sides' records up to the last epoch every side completed: the runner
turns them into the report's rows and a ``checkpoint.pt`` to resume from.

The files hold tensors, lists, dicts and numbers only, written with
``torch.save`` and read back with ``torch.load(weights_only=True)``: nothing
in them is executed. Each is written to a temporary name and renamed, so a
file is whole or absent. The folder is removed when the run ends.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = ["clear", "read_staged", "write_epoch"]

_NAME = re.compile(r"^(torch|floor|jax)-(\d+)\.pt$")


def write_epoch(folder: str | os.PathLike, side: str, step: int, epoch: int, losses: list[float],
                seconds: dict[int, float], state: dict[str, Any]) -> None:
    """Write ``side``'s record after its whole epoch ``epoch`` (1-based), ending at ``step``.

    Args:
      side: ``"torch"``, ``"floor"`` (torch's float64 twin) or ``"jax"``.
      losses: every step's loss since the run (or its resume) started.
      seconds: ``{step: seconds since the previous epoch's end}`` so far.
      state: the resume state: ``{"model": state_dict, ...}``, tensors.
    """
    import torch

    if not _NAME.match(f"{side}-{step}.pt"):
        raise ValueError(f"unknown side {side!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"step": int(step), "epoch": int(epoch), "losses": [float(v) for v in losses],
              "seconds": {int(k): float(v) for k, v in seconds.items()},
              "state": state}
    path = folder / f"{side}-{step}.pt"
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    torch.save(record, tmp)
    os.replace(tmp, path)


def _files(folder: Path) -> dict[str, dict[int, Path]]:
    found: dict[str, dict[int, Path]] = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.setdefault(match.group(1), {})[int(match.group(2))] = path
    return found


def read_staged(folder: str | os.PathLike, sides: list[str]) -> tuple[dict[str, dict[str, Any]], int] | None:
    """The sides' records up to the last epoch end that every one of ``sides`` reached, and that step.

    Each record has the shape of a finished side's (``parity.parallel``'s
    results): ``"losses"``, ``"snapshots"`` (``{step: state_dict as
    numpy}`` at each staged epoch end), ``"seconds"`` and ``"resume_state"``
    (``{"step", "epoch", "model", ...}`` at that step). ``None`` when some side
    completed no epoch, or a file cannot be read.
    """
    import torch

    files = _files(Path(folder))
    if not sides or any(side not in files for side in sides):
        return None
    common = set.intersection(*(set(files[side]) for side in sides))
    if not common:
        return None
    last = max(common)
    runs: dict[str, dict[str, Any]] = {}
    try:
        for side in sides:
            snapshots = {}
            for step in sorted(s for s in files[side] if s <= last):
                record = torch.load(files[side][step], weights_only=True)
                snapshots[step] = {k: v.numpy().copy() for k, v in record["state"]["model"].items()}
            runs[side] = {"losses": record["losses"], "snapshots": snapshots,
                          "seconds": record["seconds"],
                          "resume_state": {"step": record["step"], "epoch": record["epoch"], **record["state"]}}
    except Exception:  # noqa: BLE001 - a damaged file: nothing is kept rather than something wrong
        return None
    return runs, last


def clear(folder: str | os.PathLike) -> None:
    """Remove the staging folder (nothing if it does not exist)."""
    shutil.rmtree(folder, ignore_errors=True)

