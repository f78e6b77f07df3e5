"""Wall time of a whole ``parity run``: each framework alone, then both side by side.

    python benchmarks/parity_run.py [--config configs/lenet_digits.yaml] [--repeats N] [--json PATH]

Runs ``python -m parity run CONFIG --no-progress`` in a fresh process three
ways: ``--only torch``, ``--only jax`` and the full comparison, ``--repeats``
times each, after the time to first result: the full comparison in a fresh
process with an empty compilation cache (cold), then with the cache it filled
(warm, median of ``--repeats``), and the wall time of ``import parity``,
``import jax_impl`` and ``import parity.experiment`` (torch and JAX) in a
fresh interpreter. Reported per way: the median wall time of the process (imports,
data, the training loop, evaluation, report; JAX's compilation included,
since a user waits for it too), and the training-loop seconds the runner
measured for each framework (its report.json). The ratio is
torch's wall time over JAX's (above 1: the JAX run is faster).

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine_info, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = Path(__file__).parent / "results" / "parity_run.json"


def _import_seconds(module: str, repeats: int) -> float:
    """Median wall seconds of ``python -c "import MODULE"`` in a fresh process (the interpreter's start included)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _one_run(config: Path, only: str | None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``parity run`` in a fresh process (what a user waits for): wall seconds and the loop seconds it reported."""
    with tempfile.TemporaryDirectory() as runs:
        cmd = [sys.executable, "-m", "parity", "run", str(config), "--no-progress", "--runs-dir", runs]
        if only:
            cmd += ["--only", only]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        (report,) = Path(runs).glob("*/report.json")
        data = json.loads(report.read_text())
    epochs = data["epochs"]
    return {"wall_s": wall, "torch_loop_s": _loop_seconds(epochs, "torch_seconds"),
            "jax_loop_s": _loop_seconds(epochs, "jax_seconds"), "steps": len(data["steps"])}


def _loop_seconds(epochs: list[dict[str, Any]], key: str) -> float | None:
    """The training loop's seconds over the epochs; ``None`` for the side an ``--only`` run skipped."""
    seconds = [e[key] for e in epochs]
    return None if any(s is None for s in seconds) else sum(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "lenet_digits.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    config = args.config.resolve()
    results: dict[str, Any] = {
        "machine": machine_info(),
        "config": str(config.relative_to(ROOT)) if config.is_relative_to(ROOT) else str(config),
        "repeats": args.repeats,
        "ways": {},
    }
    # Time to first result: the full comparison with an empty compilation cache (cold), then with the cache
    # that run filled (warm), as a user's first and second `parity run` of a config.
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PARITY_CACHE_DIR=cache)
        results["cold_wall_s"] = _one_run(config, None, env)["wall_s"]
        results["warm_wall_s"] = statistics.median(_one_run(config, None, env)["wall_s"] for _ in range(args.repeats))
    results["import_s"] = {m: _import_seconds(m, args.repeats) for m in ("parity", "jax_impl", "parity.experiment")}
    print(f"cold {results['cold_wall_s']:.2f} s, warm {results['warm_wall_s']:.2f} s, imports {results['import_s']}")
    for way in ("torch", "jax", "both"):
        runs = [_one_run(config, None if way == "both" else way) for _ in range(args.repeats)]
        results["ways"][way] = {"runs": runs, "median_wall_s": statistics.median(r["wall_s"] for r in runs)}
        results["steps"] = runs[0]["steps"]
        print(f"{way:6s} median wall {results['ways'][way]['median_wall_s']:7.2f} s", flush=True)
    ways = results["ways"]
    results["ratio"] = ways["torch"]["median_wall_s"] / ways["jax"]["median_wall_s"]
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
