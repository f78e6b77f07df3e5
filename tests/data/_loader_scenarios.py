"""Child processes for ``test_dataloader_cleanup.py``: one way out of a live 2-worker DataLoader per run.

Run as ``python -m tests.data._loader_scenarios <scenario>`` (a guarded main
module, so the workers use the default forkserver context). Each scenario
starts a loader whose dataset is exported to shared memory (a 4 MiB array)
and whose batches travel through shared slots (64 KiB rows), prints
``READY {"pid": ..., "workers": [...]}`` and waits for a line on stdin; the
test inspects the processes, then writes that line or sends a signal.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from typing import Any

import numpy as np

from jax_impl.data import DataLoader, Dataset

_KEPT: list[Any] = []


class Rows(Dataset):
    """Rows of 16384 float32 (64 KiB each); ``ValueError`` at index ``fail_at``."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.data = np.arange(n * 16384, dtype=np.float32).reshape(n, 16384)
        self.fail_at = fail_at

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.fail_at:
            raise ValueError(f"bad index {i}")
        return self.data[i]


def _ready(it: Any) -> None:
    print("READY", json.dumps({"pid": os.getpid(), "workers": [w.pid for w in it._workers]}), flush=True)
    sys.stdin.readline()


def main(scenario: str) -> None:
    if scenario == "worker_exception":
        it = iter(DataLoader(Rows(64, fail_at=20), batch_size=4, num_workers=2))
        next(it)
        _ready(it)
        for _ in it:  # Raises the worker's ValueError, uncaught.
            pass
    elif scenario == "alive_at_exit":
        _KEPT.append(iter(DataLoader(Rows(64), batch_size=4, num_workers=2)))
        _KEPT.append(next(_KEPT[0]))
        _ready(_KEPT[0])  # Then the interpreter exits with the iterator and a batch alive.
    elif scenario == "signal":
        it = iter(DataLoader(Rows(64), batch_size=4, num_workers=2))
        batch = next(it)
        _ready(it)  # The test sends SIGINT or SIGKILL while this waits.
        del batch
    elif scenario == "gc":
        loader = DataLoader(Rows(64), batch_size=4, num_workers=2)
        it = iter(loader)
        batch = next(it)
        _ready(it)
        del batch, it, loader
        gc.collect()
        print("COLLECTED", flush=True)
        sys.stdin.readline()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    # Python's own SIGINT handler (KeyboardInterrupt), which the "signal" scenario's test relies on: a process
    # started from a shell's background job inherits SIGINT ignored, and Python then keeps it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main(sys.argv[1])
