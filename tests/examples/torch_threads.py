"""torch on one thread while an example loop's torch side runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread inside the block: on the shared, busy CI cores OpenMP's default team waits on
    itself (a 10-step DCGAN run of 16x16 images took 25 s on 2 busy cores with torch's default, 0.2 s on one
    thread); torch's result on one thread is torch's too (float64 DCGAN and VAE: the same distance from the
    JAX run, about 1e-15, with either)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
