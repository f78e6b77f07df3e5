"""Batches per second: jax_impl.data.DataLoader vs torch.utils.data.DataLoader.

    python benchmarks/dataloader_throughput.py [--repeats N] [--json PATH]

Two data sets, both MNIST-shaped (60,000 samples of 1x28x28 float32 and an
int64 label), batch 256, ``shuffle=True``, ``num_workers`` 0 and 2:

- ``in_memory``: ``TensorDataset`` of the two arrays (ours: numpy arrays,
  fetched with one ``__getitems__`` gather per field; torch: tensors from
  ``torch.from_numpy``, fetched sample by sample and stacked);
- ``per_sample``: a Python ``__getitem__`` doing a little numpy work per
  sample (normalise, horizontal flip on odd indices), the same class on both
  sides; torch's ``default_collate`` turns its arrays into tensors.

Worker configurations: 0; 2; 2 with ``persistent_workers=True`` (workers
started once, so epochs after the warm-up measure steady-state throughput).
One measurement is one full epoch, ``iter(loader)`` included: with workers
that counts their start (torch: ``fork``; ours: a ``forkserver`` fork, see
``jax_impl/data/dataloader.py``) and, for us, the export of the arrays to the
workers. Every configuration is warmed up by one epoch; then ours and torch's
alternate for ``--repeats`` epochs, and the table and JSON report medians.

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from jax_impl.data.dataloader import DataLoader
from jax_impl.data.dataset import Dataset, TensorDataset

DEFAULT_JSON = Path(__file__).parent / "results" / "dataloader_throughput.json"
N, BATCH = 60_000, 256


class PerSample(Dataset):
    """A per-sample Python dataset: normalise, flip odd indices (the same class for both loaders)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        img = (self.images[i] - 0.1307) / 0.3081
        if i % 2:
            img = img[..., ::-1]
        return np.ascontiguousarray(img, dtype=np.float32), int(self.labels[i])


def epoch_seconds(loader: Any) -> tuple[float, int]:
    """One full epoch (iterator creation included): seconds and batch count."""
    start = time.perf_counter()
    count = 0
    for _ in loader:
        count += 1
    return time.perf_counter() - start, count


def make_loaders(
    case: str, workers: int, persistent: bool, images: np.ndarray, labels: np.ndarray
) -> tuple[Any, Any]:
    kwargs = {
        "batch_size": BATCH,
        "shuffle": True,
        "num_workers": workers,
        "persistent_workers": persistent,
    }
    if case == "in_memory":
        ours = DataLoader(TensorDataset(images, labels), **kwargs)
        theirs = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(
                torch.from_numpy(images), torch.from_numpy(labels)
            ),
            **kwargs,
        )
    else:
        ours = DataLoader(PerSample(images, labels), **kwargs)
        theirs = torch.utils.data.DataLoader(PerSample(images, labels), **kwargs)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    images = rng.random((N, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, size=N).astype(np.int64)

    rows = []
    print(
        f"{'case':<11} {'workers':>10} {'ours b/s':>10} {'torch b/s':>10} {'ours/torch':>10}"
    )
    configs = [(0, False), (2, False), (2, True)]
    for case in ("in_memory", "per_sample"):
        for workers, persistent in configs:
            ours, theirs = make_loaders(case, workers, persistent, images, labels)
            # Warm-up: starts the fork server once (and persistent workers).
            epoch_seconds(ours)
            epoch_seconds(theirs)
            times: dict[str, list[float]] = {"ours": [], "torch": []}
            batches = 0
            for _ in range(args.repeats):
                for name, loader in (("ours", ours), ("torch", theirs)):
                    seconds, batches = epoch_seconds(loader)
                    times[name].append(seconds)
            ours_bps = batches / statistics.median(times["ours"])
            torch_bps = batches / statistics.median(times["torch"])
            row = {
                "case": case,
                "num_workers": workers,
                "persistent_workers": persistent,
                "batches_per_epoch": batches,
                "ours_batches_per_s": round(ours_bps, 1),
                "torch_batches_per_s": round(torch_bps, 1),
                "ratio_ours_over_torch": round(ours_bps / torch_bps, 2),
                "ours_epoch_s": [round(t, 4) for t in times["ours"]],
                "torch_epoch_s": [round(t, 4) for t in times["torch"]],
            }
            rows.append(row)
            label = f"{workers}{'+persist' if persistent else ''}"
            print(
                f"{case:<11} {label:>10} {ours_bps:>10.1f} {torch_bps:>10.1f}"
                f" {ours_bps / torch_bps:>10.2f}"
            )

    result = {
        "benchmark": "dataloader_throughput",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "dataset": f"{N} x 1x28x28 float32 + int64 labels",
        "batch_size": BATCH,
        "shuffle": True,
        "repeats": args.repeats,
        "statistic": "median epoch time, iter(loader) included",
        "results": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
