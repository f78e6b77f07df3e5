"""Time the five example training loops (``examples/loops``) on torch and on JAX, each as a user runs it.

    python benchmarks/training_loops.py [--rounds N] [--scale X] [--json PATH] [--only vae,reinforce,...]

The loops outside supervised classification, each the official PyTorch
example's loop written on both sides (the same numbers: tests/examples): a
VAE, a DCGAN, the word-level LSTM language model (truncated BPTT), REINFORCE
on CartPole (one jitted call per time step, the action drawn on the host),
and the time-sequence LSTM trained by LBFGS (its loop on the host). Each runs
in its example's dtype: float32, and float64 for the time-sequence example,
whose original is ``.double()``.

Each run is a fresh process, timed from after its imports to the loop's end
(``run``: what a run of ``steps`` steps costs a user, every program the JAX
side uses compiled in it), and step by step: the process notes the time at
which the loop hands each step's values to its history (the examples'
``record``), and a step's cost is the median over the steps from ``warm`` on,
past the first steps' compiles (a compile of a later step, the word LM's
short last batch or its evaluation, stays out of a median). Both frameworks
take the same steps (the same seed, the same trajectory: REINFORCE's
episodes have the same lengths on both sides), each with its own default
threads. They alternate within each of ``--rounds`` rounds, which side first
swapped between rounds; ratios are paired by round, torch's time over JAX's
(above 1 JAX is faster). ``--scale`` multiplies every case's step counts
(a quick run).

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results" / "training_loops.json"

# name -> (what, dtype, warm, steps): a step is a batch, an episode (reinforce) or an LBFGS step.
CASES: dict[str, tuple[str, str, int, int]] = {
    "vae": ("VAE (64-400-20 on 8x8 digits), Adam, batch 128, `randn_like` noise each step", "float32", 20, 220),
    "dcgan": ("DCGAN at 16x16 (nz 8, ngf = ndf = 4), batch 16: discriminator and generator Adam steps",
              "float32", 10, 110),
    "word_lm": ("2-layer LSTM word LM (emsize = nhid = 32), truncated BPTT 10 x batch 8, clip 0.25, SGD",
                "float32", 20, 220),
    "reinforce": ("REINFORCE on CartPole: one jitted call per time step (the policy, the sampled action, its "
                  "log-probability's gradient), Adam per episode (steps are episodes)", "float32", 20, 60),
    "time_sequence": ("time-sequence LSTMCells (51 x 2), LBFGS history 100, float64 as the example's",
                      "float64", 2, 6),
}


# What the example loops import inside their train functions, on either side.
_LIBRARIES = ("torch", "torch.nn", "torch.optim", "torch.distributions", "torch.utils.data", "jax", "flax.nnx",
              "jax_impl.data", "jax_impl.distributions", "jax_impl.kernels", "jax_impl.nn", "jax_impl.nn.utils",
              "jax_impl.optim", "jax_impl.random", "jax_impl.random.host_draws", "jax_impl.data.datasets")


def _timed(name: str, framework: str, steps: int, dtype: str) -> dict[str, Any]:
    """In this process: the run's seconds and the time (from its start) at which each step was recorded."""
    for library in _LIBRARIES:  # imported before the clock starts: a run is the loop, not the imports
        importlib.import_module(library)

    module = importlib.import_module(f"examples.loops.{name}")
    train, record = getattr(module, f"train_{framework}"), module.record
    marks: list[float] = []

    def timed_record(*args: Any, **kwargs: Any) -> None:
        record(*args, **kwargs)
        marks.append(time.perf_counter())

    module.record = timed_record
    start = time.perf_counter()
    train(steps=steps, dtype=dtype)
    end = time.perf_counter()
    return {"run_s": end - start, "marks": [m - start for m in marks]}


def _run(name: str, framework: str, steps: int, dtype: str) -> tuple[float, list[float]]:
    """:func:`_timed` in a fresh process (nothing compiled, nothing cached)."""
    cmd = [sys.executable, __file__, "--child", name, framework, str(steps), dtype]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({framework}) failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["run_s"], result["marks"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--only", default="", help="comma-separated cases (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every case's step counts (quick runs)")
    parser.add_argument("--child", nargs=4, metavar=("CASE", "FRAMEWORK", "STEPS", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, framework, steps, dtype = args.child
        print(json.dumps(_timed(name, framework, int(steps), dtype)))
        return 0
    names = _common.chosen(parser, args.only, CASES)
    results: dict[str, Any] = {}
    for name in names:
        what, dtype, warm, steps = CASES[name]
        warm, steps = max(1, round(warm * args.scale)), max(2, round(steps * args.scale))
        steps = max(steps, warm + 1)
        runs: dict[str, list[float]] = {"torch": [], "jax": []}
        step_ms: dict[str, list[float]] = {"torch": [], "jax": []}
        for r in range(args.rounds):
            for framework in (("torch", "jax") if r % 2 == 0 else ("jax", "torch")):
                seconds, marks = _run(name, framework, steps, dtype)
                if len(marks) != steps:
                    raise RuntimeError(f"{name} ({framework}) recorded {len(marks)} steps, expected {steps}")
                runs[framework].append(seconds)
                step_ms[framework].append(statistics.median(b - a for a, b in zip(marks[warm - 1:], marks[warm:])) * 1e3)
        row: dict[str, Any] = {"what": what, "dtype": dtype, "steps": steps, "warm": warm}
        for f in ("torch", "jax"):
            row[f] = {"run_s": statistics.median(runs[f]), "step_ms": statistics.median(step_ms[f]),
                      "runs_s": runs[f], "round_step_ms": step_ms[f]}
        row["run_ratio"] = statistics.median(t / j for t, j in zip(runs["torch"], runs["jax"]))
        row["step_ratio"] = statistics.median(t / j for t, j in zip(step_ms["torch"], step_ms["jax"]))
        results[name] = row
        print(f"{name:14s} run torch {row['torch']['run_s']:7.2f} s  jax {row['jax']['run_s']:7.2f} s  "
              f"ratio {row['run_ratio']:.2f} | step torch {row['torch']['step_ms']:8.2f} ms  "
              f"jax {row['jax']['step_ms']:8.2f} ms  ratio {row['step_ratio']:.2f}", flush=True)
    _common.write_json(args.json, {"benchmark": "training_loops", "machine": _common.machine_info(),
                                   "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
