"""Files of a run folder: atomic writes, race-free folder creation, a writability probe.

Every file the runner writes (checkpoints, reports) goes through
:func:`atomic_write`: the bytes land in a unique temporary file beside the
target, are flushed to disk (``fsync``), and replace the target with one
``os.replace``. A reader therefore sees the old file or the new one, never
half of either; a failed write (a full disk) removes its temporary file and
leaves the previous version in place.
"""

from __future__ import annotations

import datetime
import errno
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "check_writable", "make_run_folder", "no_space_message"]

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file, ``fsync`` and ``os.replace``.

    Raises:
      OSError: as the write raised it (``ENOSPC`` for a full disk), with
        ``filename`` set to ``path``. The temporary file is removed and an
        existing ``path`` is left untouched.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the run's files from other users
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except OSError as error:
        _remove_quietly(tmp)
        if error.filename is None:
            error.filename = str(path)
        raise
    except BaseException:
        _remove_quietly(tmp)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def make_run_folder(runs_dir: str | os.PathLike, name: str) -> Path:
    """A new folder ``runs_dir/<name>-<YYYYmmdd-HHMMSS>[-k]``, created atomically.

    Two runs starting in the same second get different folders: ``mkdir``
    itself decides (no exists-then-create window), retrying with the next
    suffix on ``FileExistsError``.
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    parent = Path(runs_dir)
    parent.mkdir(parents=True, exist_ok=True)
    for suffix in range(10_000):
        folder = parent / (f"{name}-{stamp}" + (f"-{suffix}" if suffix else ""))
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(errno.EEXIST, "no free run folder name", str(parent / f"{name}-{stamp}"))


def check_writable(folder: str | os.PathLike) -> None:
    """Create ``folder`` if needed and prove a file can be written in it.

    The probe has a unique name, so runs starting together do not remove
    each other's probe.

    Raises:
      OSError: the folder cannot be created or written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".parity-write-test-", dir=folder)
    os.close(fd)
    os.unlink(probe)


def no_space_message(error: OSError) -> str | None:
    """``"no space left on device: PATH"`` for a full disk (or quota), else ``None``."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device: {error.filename or '?'}"
    return None
