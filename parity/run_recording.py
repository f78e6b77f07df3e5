"""The recordings ``parity run`` writes in its run folder, one per side it trains, and how ``parity compare``
finds them in a run folder.

A run records, through :class:`parity.Recorder`, in its run folder:

- ``recording-torch/``: torch's run (unless ``--only jax``);
- ``recording-jax/``: the JAX run (unless ``--only torch``);
- ``recording-torch-float64/``: torch's float64 twin of a float32 run (:mod:`parity.floor`), beside the
  torch side (``train.floor``).

Each holds per step the scalars ``loss`` (the step's loss, :func:`parity.torch_step.step_loss`) and ``lr``
(param group 0's; ``lrs.<g>`` for every group when there are several), and at each epoch's last step the
model's ``state_dict`` under torch's names (``model.<key>``; the JAX model's under the same keys,
:func:`parity.convert.module_state`), so :func:`parity.compare_runs` matches the two sides name by name.
``parity run CONFIG --only torch`` on one machine and ``--only jax`` on another, then
``parity compare A/<run> B/<run>``, judge what a joint run judges.

A resumed run (``--resume``) records nothing: its run folder holds the first run's recordings, and a
recording is one run from its first step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from parity.recorder import Recorder
from parity.recording import META, RecordingError

__all__ = ["FLOOR", "JAX", "TORCH", "RunRecordings", "recording_folders"]

TORCH, JAX, FLOOR = "recording-torch", "recording-jax", "recording-torch-float64"


class RunRecordings:
    """The recorders of one run: a :class:`parity.Recorder` per side trained.

    The runner hands it each step's record (:meth:`step`) and, after each epoch, the models
    (:meth:`epoch_end`): a step's scalars are held until the next step or the epoch's end, so that the
    epoch's last step is recorded once, with its tensors.

    Args:
      folder: the run folder.
      sides: which of ``"torch"``, ``"jax"``, ``"floor"`` the run trains.
      dtype: the run's dtype (``train.dtype``); the floor twin records float64.
      meta: facts about the run for every recording's ``meta.json`` (the config's name, its rtol).
    """

    _FOLDERS = {"torch": (TORCH, "torch"), "jax": (JAX, "jax"), "floor": (FLOOR, "torch")}
    _LOSSES = {"torch": "torch_loss", "jax": "jax_loss", "floor": "torch_f64_loss"}

    def __init__(self, folder: str | os.PathLike, sides: list[str], *, dtype: str, meta: dict[str, Any]) -> None:
        self.recorders: dict[str, Recorder] = {}
        for side in sides:
            name, framework = self._FOLDERS[side]
            # keep_every=1: every step given tensors keeps them (only the epochs' last steps are).
            self.recorders[side] = Recorder(Path(folder) / name, framework, keep_every=1, meta={
                **meta, "dtype": "float64" if side == "floor" else dtype, "side": side})
        self._held: tuple[int, dict[str, dict[str, Any]]] | None = None

    def step(self, record: dict[str, Any]) -> None:
        """Hold a step's record (the runner's: ``step``, ``lr``, ``lrs``, ``torch_loss``, ``jax_loss``,
        ``torch_f64_loss``), recording the one held before it."""
        self._flush({})
        scalars = {"lr": record["lr"], **({"lrs": list(record["lrs"])} if "lrs" in record else {})}
        self._held = (int(record["step"]), {side: {"loss": record.get(self._LOSSES[side]), **scalars}
                                            for side in self.recorders})

    def epoch_end(self, models: dict[str, Any]) -> None:
        """Record the epoch's last step with each side's model (``side -> torch or flax.nnx module``)."""
        self._flush(models)

    def close(self, status: str = "complete") -> None:
        """Record the step held, and close every recorder."""
        try:
            self._flush({})
        finally:
            for recorder in self.recorders.values():
                recorder.close(status)

    def _flush(self, models: dict[str, Any]) -> None:
        if self._held is None:
            return
        step, scalars = self._held
        self._held = None
        for side, recorder in self.recorders.items():
            recorder.step(step, **scalars[side], model=models.get(side))


def recording_folders(run_a: str | os.PathLike, run_b: str | os.PathLike,
                      floor: str | os.PathLike | None = None) -> tuple[Path, Path, Path | None, float | None]:
    """The recordings to compare when ``parity compare`` is given run folders of ``parity run``.

    A run folder (one without ``meta.json`` of its own, holding ``recording-*`` folders) stands for its
    torch recording as ``run_a``, its JAX recording as ``run_b`` and its float64 twin's as ``floor``; without
    ``floor``, ``run_a``'s float64 twin is the floor when it has one. A recording folder stands for itself.

    Returns:
      ``(a, b, floor, rtol)``: ``rtol`` is the config's ``train.tolerance.rtol`` recorded in ``run_a``'s
      torch recording when ``run_a`` is a run folder, else ``None``.

    Raises:
      RecordingError: a run folder without the recording it stands for (a run with ``--only`` the other
        side, or a resumed or data-parallel run, which record nothing).
    """
    a, a_is_run = _pick(run_a, TORCH, "RUN_A")
    b, _ = _pick(run_b, JAX, "RUN_B")
    f = None
    if floor is not None:
        f, _ = _pick(floor, FLOOR, "--floor")
    elif a_is_run and (Path(run_a) / FLOOR / META).exists():
        f = Path(run_a) / FLOOR
    rtol = None
    if a_is_run:
        import json

        rtol = json.loads((a / META).read_text(encoding="utf-8")).get("meta", {}).get("rtol")
    return a, b, f, rtol


def _is_run_folder(folder: Path) -> bool:
    return folder.is_dir() and not (folder / META).exists() and any(
        (folder / name).is_dir() for name in (TORCH, JAX, FLOOR))


def _pick(folder: str | os.PathLike, name: str, role: str) -> tuple[Path, bool]:
    folder = Path(folder)
    if not _is_run_folder(folder):
        return folder, False
    if not (folder / name / META).exists():
        present = ", ".join(sorted(p.name for p in folder.iterdir() if p.name.startswith("recording-")))
        raise RecordingError(f"{role}: the run folder {folder} has no {name}/ (it holds {present}); {role} of a "
                             f"run folder is its {name} recording")
    return folder / name, True
