"""The configs section of docs/parity.md (imported by docs/generate_parity.py).

Every file in configs/ is run in full with ``parity.experiment.run_experiment``
(both frameworks, the config's own dtype and tolerance) and reported with its
final parameter and BatchNorm-buffer divergence, accuracy and agreement, and
wall times. The last column is the config's precision floor: how far
torch's *own* float32 run is from its float64 run after the same number of
steps (``parity.floor.torch_precision_floor``). A float32 parity bound below
that floor cannot be met by an implementation that is not bit-identical to
torch's kernels.
"""

from __future__ import annotations

import time
from pathlib import Path

from parity.config import load_config
from parity.experiment import run_experiment
from parity.floor import torch_precision_floor

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _fmt(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.2g}"


def configs_section() -> str:
    lines = [
        "## Experiment configs (`parity run`)",
        "",
        "Each file in `configs/`, run in full by `parity run` (both frameworks, the config's dtype and",
        "tolerance). Divergence: `max |jax - torch| / max |torch|` per tensor, worst tensor; BN: the same",
        "for BatchNorm running statistics. *torch f32 vs f64*: torch's own float32 run against its",
        "float64 run after the same steps (the precision floor of the training itself).",
        "",
        "| config | dtype | steps | divergence | worst tensor | BN | tolerance | passed | torch acc | jax acc "
        "| agreement | torch s | jax s | torch f32 vs f64 |",
        "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in sorted(CONFIGS.glob("*.yaml")):
        cfg = load_config(path)
        start = time.perf_counter()
        report = run_experiment(cfg, progress=False, write=False)
        last = report.epochs[-1]
        parallel = cfg.parallel is not None and cfg.parallel.world_size > 1
        # A data-parallel float32 run measures its own floor (torch's float64 DDP twin); float64 runs have none.
        floor = _fmt(last.floor_max_rel) if parallel else _fmt(torch_precision_floor(cfg, last.steps)["max_rel"])
        t_s = sum(e.torch_seconds for e in report.epochs)
        j_s = sum(e.jax_seconds for e in report.epochs if e.jax_seconds == e.jax_seconds)
        lines.append(
            f"| `{path.name}` | {cfg.train.dtype} | {last.steps} | {_fmt(last.param_max_rel)} | "
            f"{last.worst_leaf or '-'} | {_fmt(last.buffer_max_rel)} | {cfg.train.tolerance.rtol:.0e} | "
            f"{'yes' if report.passed else 'no'} | {_fmt(last.torch_accuracy)} | {_fmt(last.jax_accuracy)} | "
            f"{_fmt(last.agreement)} | {t_s:.1f} | {j_s:.1f} | {floor} |"
        )
        print(f"{path.name:45s} {time.perf_counter() - start:6.1f} s", flush=True)
    lines += ["", "DDP configs (`parallel:`): seconds are rank 0's and the JAX process's training loops; the floor "
              "is the run's own torch float64 DDP twin.", ""]
    return "\n".join(lines) + "\n"
