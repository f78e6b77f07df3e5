"""An example loop's torch side in a subprocess on another of torch's CPU code paths.

Switches such as ``MKL_CBWR`` and ``ATEN_CPU_CAPABILITY`` are read when torch and MKL load, so a run on
another path is a process of its own, on one thread as the in-process runs (``torch_threads.one_thread``).
It runs while the caller runs the other sides: :func:`start` returns at once, :func:`records_of` waits.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
_RUN = """
import pickle, sys, importlib
import torch
torch.set_num_threads(1)
loop = importlib.import_module("examples.loops." + sys.argv[1])
pickle.dump(loop.train_torch(**eval(sys.argv[2])), sys.stdout.buffer)
"""


def subprocess_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra``, one OpenMP thread and the checkout on ``PYTHONPATH``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra, "PYTHONPATH": path}


def start(loop: str, env: dict[str, str], **kwargs: Any) -> subprocess.Popen:
    """Starts ``examples.loops.<loop>.train_torch(**kwargs)`` under ``env`` (plain-literal ``kwargs``)."""
    return subprocess.Popen([sys.executable, "-c", _RUN, loop, repr(kwargs)], env=subprocess_env(env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def records_of(process: subprocess.Popen) -> list[dict[str, Any]]:
    """The records of a run :func:`start` started, once it ends."""
    out, err = process.communicate()
    assert process.returncode == 0, err.decode()
    return pickle.loads(out)
