"""What every benchmark script shares: timing, the machine's description, JSON output."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def time_blocks(groups: dict[str, dict[str, Callable[[], None]]], *, warmup: int, repeats: int,
                rounds: int) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`time_calls` for several groups (frameworks), in ``rounds`` alternating blocks.

    Each round times every group in turn for ``ceil(repeats / rounds)`` calls
    of each of its calls (round-robin inside the group), so that a drift in
    the machine's speed during the run hits every group alike, while calls of
    different groups are never interleaved one by one (torch's OpenMP pool and
    XLA's thread pool slow each other down when they alternate call by call).
    Medians and minima are over all the samples of all rounds; ``round_medians_ms``
    holds each round's block median, for :func:`paired_ratio`.
    """
    per_round = -(-repeats // rounds)
    samples: dict[str, dict[str, list[float]]] = {g: {n: [] for n in calls} for g, calls in groups.items()}
    round_medians: dict[str, dict[str, list[float]]] = {g: {n: [] for n in calls} for g, calls in groups.items()}
    warmup_s: dict[str, dict[str, float]] = {}
    for r in range(rounds):
        for g, calls in groups.items():
            res = time_calls(calls, warmup=warmup if r == 0 else 1, repeats=per_round)
            for n, v in res.items():
                samples[g][n].extend(t / 1e3 for t in v["samples_ms"])
                round_medians[g][n].append(v["median_ms"])
                warmup_s.setdefault(g, {}).setdefault(n, v["warmup_s"])
    return {
        g: {
            n: {
                "median_ms": 1e3 * statistics.median(ts),
                "min_ms": 1e3 * min(ts),
                "max_ms": 1e3 * max(ts),
                "warmup_s": warmup_s[g][n],
                "samples_ms": [round(1e3 * t, 3) for t in ts],
                "round_medians_ms": [round(t, 3) for t in round_medians[g][n]],
            }
            for n, ts in by_name.items()
        }
        for g, by_name in samples.items()
    }


def time_calls(calls: dict[str, Callable[[], None]], *, warmup: int, repeats: int) -> dict[str, dict[str, Any]]:
    """Warm every call up, then time them round-robin ``repeats`` times.

    Round-robin, so that drift in the machine's speed (shared hosts, turbo,
    other processes) hits every variant alike. Each call must block until its
    work is done (``jax.block_until_ready``).
    """
    warmup_s = {}
    for name, call in calls.items():
        start = time.perf_counter()
        for _ in range(warmup):
            call()
        warmup_s[name] = time.perf_counter() - start
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            t = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - t)
    return {
        name: {
            "median_ms": 1e3 * statistics.median(ts),
            "min_ms": 1e3 * min(ts),
            "max_ms": 1e3 * max(ts),
            "warmup_s": warmup_s[name],
            "samples_ms": [round(1e3 * t, 3) for t in ts],
        }
        for name, ts in samples.items()
    }


def ratio(torch_timing: dict[str, Any], ours: dict[str, Any]) -> float:
    """torch's median time over ours: above 1 means we are faster."""
    return torch_timing["median_ms"] / ours["median_ms"]


def paired_ratio(torch_timing: dict[str, Any], ours: dict[str, Any]) -> float:
    """The median over rounds of torch's block median over ours in the same round (:func:`time_blocks`).

    A shared host's speed drifts by up to ~1.7x within a run, in phases of
    seconds: a slow phase that covers more of one framework's blocks than the
    other's moves the ratio of overall medians (measured: 0.72 for ResNet-18
    inference where the rounds after the slow phase read 0.90-0.95). The
    two blocks of a round are adjacent in time, so their ratio cancels a drift
    slower than a round, and the median over rounds discards the rounds a
    phase change cut through.
    """
    pairs = [t / o for t, o in zip(torch_timing["round_medians_ms"], ours["round_medians_ms"], strict=True)]
    return statistics.median(pairs)


def _thp_mode() -> str:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), or ``""``."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return ""
    return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()


def machine_info() -> dict[str, Any]:
    """The CPU, core count and library versions a result was measured with."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "transparent_hugepage": _thp_mode(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    import numpy

    info["numpy"] = numpy.__version__
    try:
        import jax
        import jaxlib

        info.update(jax=jax.__version__, jaxlib=jaxlib.__version__, jax_devices=[str(d) for d in jax.devices()])
    except ImportError:  # pragma: no cover
        pass
    try:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    torch_cpu_capability=torch.backends.cpu.get_cpu_capability())
        if torch.cuda.is_available():
            info.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), torch_cuda=torch.version.cuda)
    except ImportError:  # pragma: no cover
        pass
    return info


def chosen(parser: Any, only: str, known: Iterable[str]) -> list[str]:
    """The cases an ``--only a,b`` option names (all of ``known`` when empty); an unknown one is the parser's
    usage error."""
    known = list(known)
    names = [n for n in only.split(",") if n] or known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {known}")
    return names


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {path}")
