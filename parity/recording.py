"""A recording's folder on disk, and reading it back: what :class:`parity.Recorder` writes.

A recording is a folder of safe files (nothing in it is unpickled):

- ``meta.json``: ``{"format": "parity-recording", "version": 1, "framework", "dtype", "keep_every",
  "keep_steps", "versions", "meta", "names", "status", "first_step", "last_step", "steps",
  "tensor_steps"}``. ``names`` maps every recorded name, in the order first recorded, to ``{"kind":
  "scalar" | "tensor", "shape", "dtype"}`` (the first occurrence's). ``status`` is ``"recording"`` until
  :meth:`parity.Recorder.close`, then ``"complete"`` (or ``"stopped by <error>"`` when the ``with`` block
  raised). Rewritten atomically whenever a new name appears and at close.
- ``scalars.jsonl``: one JSON line per step, appended and flushed as the step is recorded:
  ``{"step": i, "scalars": {name: number}}``; a non-finite number is the string ``"nan"``, ``"inf"`` or
  ``"-inf"`` (JSON has none). A line cut short by a killed process is the last one, and is skipped.
- ``tensors/step-<i, 8 digits>.safetensors``: every tensor of a kept step (safetensors, written
  atomically). Dtypes safetensors' NumPy reader lacks (bfloat16, float8, complex128) are stored as a view
  (unsigned integers of the same width; complex128 as float64 pairs) with the real dtype in the file's
  metadata (``dtype.<name>``), and come back as they were.

:func:`read_recording` reads a folder, complete or interrupted: every step whose line was written, and
every kept step's tensors. Every problem raises :class:`RecordingError` (bad input: exit code 2 on the
command line).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from parity.config import ConfigError

__all__ = ["FORMAT", "VERSION", "Recording", "RecordingError", "decode_number", "encode_number",
           "read_recording", "step_ranges", "tensor_file", "tensors_from_bytes", "tensors_to_bytes"]

FORMAT = "parity-recording"
VERSION = 1
META = "meta.json"
SCALARS = "scalars.jsonl"
TENSORS = "tensors"
_TENSOR_FILE = re.compile(r"^step-(\d+)\.safetensors$")
# The dtypes safetensors' NumPy reader returns as they are; others travel as a view (see the module docstring).
_NATIVE = {"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16",
           "uint8", "bool", "complex64"}


class RecordingError(ConfigError):
    """A folder that is not a readable recording: missing, foreign, or damaged."""


def tensor_file(folder: Path, step: int) -> Path:
    """The file holding ``step``'s tensors in the recording ``folder``."""
    return Path(folder) / TENSORS / f"step-{step:08d}.safetensors"


def encode_number(value: float | int) -> float | int | str:
    """A scalar as ``scalars.jsonl`` holds it: numbers as they are, non-finite floats as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def decode_number(value: Any) -> float | int:
    """The inverse of :func:`encode_number`."""
    if isinstance(value, str):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return value


def tensors_to_bytes(tensors: dict[str, np.ndarray], step: int) -> bytes:
    """One kept step's tensors as a safetensors file (see the module docstring for the dtypes it views)."""
    from safetensors.numpy import save

    arrays, metadata = {}, {"step": str(step)}
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        if array.dtype.name not in _NATIVE:
            metadata[f"dtype.{name}"] = array.dtype.name
            if array.dtype.kind == "c":
                array = np.ascontiguousarray(array.view(np.float64 if array.dtype.itemsize == 16 else np.float32)
                                             .reshape(*array.shape, 2))
            else:
                array = array.view(f"uint{8 * array.dtype.itemsize}")
        arrays[name] = array
    return save(arrays, metadata=metadata)


def tensors_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    """The inverse of :func:`tensors_to_bytes`."""
    from safetensors.numpy import load

    arrays = load(data)
    header_len = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8:8 + header_len]).get("__metadata__") or {}
    for key, dtype_name in metadata.items():
        if not key.startswith("dtype."):
            continue
        name = key[len("dtype."):]
        dtype = _dtype(dtype_name)
        array = arrays[name]
        if dtype.kind == "c":
            arrays[name] = np.ascontiguousarray(array).view(dtype).reshape(array.shape[:-1])
        else:
            arrays[name] = array.view(dtype)
    return arrays


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


@dataclasses.dataclass
class Recording:
    """A recording read back by :func:`read_recording`.

    Attributes:
      folder: the recording's folder.
      framework: the ``framework`` the recorder was given (``"torch"``, ``"jax"``, ...).
      dtype: the recording's float dtype (its ``meta["dtype"]``, else the first floating value's), or ``None``.
      meta: the whole ``meta.json``.
      names: name -> ``{"kind", "shape", "dtype"}``, in the order first recorded.
      scalars: step -> ``{name: number}``, every step recorded, in step order.
      tensor_steps: the kept steps (their tensors are on disk), ascending.
      complete: ``False`` for a recording that was never closed (an interrupted run).
    """

    folder: Path
    framework: str
    dtype: str | None
    meta: dict[str, Any]
    names: dict[str, dict[str, Any]]
    scalars: dict[int, dict[str, float | int]]
    tensor_steps: list[int]
    complete: bool

    @property
    def steps(self) -> list[int]:
        """Every recorded step, ascending."""
        return list(self.scalars)

    def tensors(self, step: int) -> dict[str, np.ndarray]:
        """``name -> array`` of a kept step.

        Raises:
          RecordingError: ``step`` was not kept, or its file is damaged.
        """
        if step not in self.tensor_steps:
            raise RecordingError(f"{self.folder}: step {step} was not kept (kept: {step_ranges(self.tensor_steps)})")
        path = tensor_file(self.folder, step)
        try:
            return tensors_from_bytes(path.read_bytes())
        except OSError as error:
            raise RecordingError(f"cannot read {path}: {error.strerror or error}") from None
        except Exception as error:  # noqa: BLE001 - any failure to parse a recorded file is bad input
            raise RecordingError(f"{path} is damaged: {str(error).splitlines()[0][:160] if str(error) else ''}"
                                 ) from None


def read_recording(folder: str | Path) -> Recording:
    """Read a recording folder (complete or interrupted).

    Raises:
      RecordingError: the folder is missing, holds no ``meta.json`` of this format, or a line of
        ``scalars.jsonl`` other than a cut-short last one is damaged.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise RecordingError(f"recording not found: {folder} is not a folder")
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordingError(f"{folder} is not a parity recording: it has no {META} (one written by "
                             "parity.Recorder)") from None
    except (OSError, ValueError) as error:
        raise RecordingError(f"cannot read {folder / META}: {error}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RecordingError(f"{folder} is not a parity recording: its {META} is not of format {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise RecordingError(f"{folder}: recording version {meta.get('version')!r}; this parity reads version "
                             f"{VERSION}")
    names = meta.get("names")
    if not isinstance(names, dict):
        raise RecordingError(f"{folder / META} is damaged: 'names' is {type(names).__name__}")
    return Recording(folder=folder, framework=str(meta.get("framework")), dtype=meta.get("dtype"), meta=meta,
                     names=names, scalars=_read_scalars(folder / SCALARS), tensor_steps=_tensor_steps(folder),
                     complete=meta.get("status") == "complete")


def _read_scalars(path: Path) -> dict[int, dict[str, float | int]]:
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise RecordingError(f"cannot read {path}: {error.strerror or error}") from None
    out: dict[int, dict[str, float | int]] = {}
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step = record["step"]
            if not isinstance(step, int) or isinstance(step, bool):
                raise ValueError(f"step {step!r}")
            out[step] = {str(k): decode_number(v) for k, v in record["scalars"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            if number == last and lines[-1]:
                break  # no newline after it: cut short by a killed process; the steps before it are complete
            raise RecordingError(f"{path}, line {number + 1} is damaged: {error}") from None
    return dict(sorted(out.items()))


def _tensor_steps(folder: Path) -> list[int]:
    try:
        files = list((folder / TENSORS).iterdir())
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for f in files if (m := _TENSOR_FILE.match(f.name)))


def step_ranges(steps: list[int]) -> str:
    """``0-4, 10, 20-21`` for ``[0, 1, 2, 3, 4, 10, 20, 21]``."""
    parts, start = [], None
    for i, step in enumerate(steps):
        if start is None:
            start = step
        if i + 1 == len(steps) or steps[i + 1] != step + 1:
            parts.append(str(start) if start == step else f"{start}-{step}")
            start = None
    return ", ".join(parts) or "none"
