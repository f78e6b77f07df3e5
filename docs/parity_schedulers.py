"""The LR-scheduler section of docs/parity.md (imported by docs/generate_parity.py).

For each scheduler and a representative configuration, torch's
``optimizer.param_groups[0]['lr']`` after each of 1000 ``scheduler.step()``
calls is compared with ``jax_impl.optim.lr_scheduler`` evaluated on the host
(Python float64) and under ``jax.jit`` (float32), and with the nearest optax
schedule a porter would write (evaluated by optax, float32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from jax_impl.optim import lr_scheduler as S
from parity.ulp import ulp_distance

STEPS = 1000
BASE = 0.1


def _torch_lrs(make: Callable[[torch.optim.Optimizer], Any], steps: int = STEPS) -> np.ndarray:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=BASE, momentum=0.9)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(steps - 1):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return np.array(lrs, dtype=np.float64)


L = torch.optim.lr_scheduler

# (label, torch builder, jax_impl schedule, nearest optax schedule or None, note)
CASES: list[tuple[str, Callable, Any, Any, str]] = [
    ("StepLR(step_size=30, gamma=0.1)", lambda o: L.StepLR(o, 30, 0.1), S.step_lr(BASE, step_size=30, gamma=0.1),
     optax.exponential_decay(BASE, 30, 0.1, staircase=True), ""),
    ("MultiStepLR(milestones=[300, 600, 600], gamma=0.5)", lambda o: L.MultiStepLR(o, [300, 600, 600], 0.5),
     S.multi_step_lr(BASE, milestones=[300, 600, 600], gamma=0.5), optax.piecewise_constant_schedule(BASE, {300: 0.5, 600: 0.25}),
     "duplicate milestones compound"),
    ("ConstantLR(factor=1/3, total_iters=5)", lambda o: L.ConstantLR(o, 1 / 3, 5), S.constant_lr(BASE, factor=1 / 3, total_iters=5),
     optax.piecewise_constant_schedule(BASE / 3, {5: 3.0}), "recursive lr*f*(1/f) is not base_lr"),
    ("LinearLR(start_factor=0.1, total_iters=100)", lambda o: L.LinearLR(o, 0.1, 1.0, 100), S.linear_lr(BASE, start_factor=0.1, total_iters=100),
     optax.linear_schedule(BASE * 0.1, BASE, 100), ""),
    ("ExponentialLR(gamma=0.995)", lambda o: L.ExponentialLR(o, 0.995), S.exponential_lr(BASE, gamma=0.995),
     optax.exponential_decay(BASE, 1, 0.995), ""),
    ("PolynomialLR(total_iters=800, power=2.0)", lambda o: L.PolynomialLR(o, 800, 2.0), S.polynomial_lr(BASE, total_iters=800, power=2.0),
     optax.polynomial_schedule(BASE, 0.0, 2.0, 800), ""),
    ("CosineAnnealingLR(T_max=300, eta_min=0.001)", lambda o: L.CosineAnnealingLR(o, 300, 1e-3),
     S.cosine_annealing_lr(BASE, T_max=300, eta_min=1e-3), optax.cosine_decay_schedule(BASE, 300, alpha=1e-3 / BASE),
     "torch rises again past T_max; optax clamps"),
    ("CosineAnnealingWarmRestarts(T_0=100, T_mult=2)", lambda o: L.CosineAnnealingWarmRestarts(o, 100, 2),
     S.cosine_annealing_warm_restarts(BASE, T_0=100, T_mult=2),
     optax.sgdr_schedule([dict(init_value=BASE, peak_value=BASE, warmup_steps=0, decay_steps=d, end_value=0.0) for d in (100, 200, 400, 800)]),
     ""),
    ("OneCycleLR(max_lr=1.0, total_steps=1000)", lambda o: L.OneCycleLR(o, 1.0, total_steps=STEPS), S.one_cycle_lr(BASE, max_lr=1.0, total_steps=STEPS),
     optax.cosine_onecycle_schedule(STEPS, 1.0), "optax peaks at int(pct*T), torch at pct*T-1"),
    ("CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=50, mode='triangular2')",
     lambda o: L.CyclicLR(o, 0.01, 0.1, step_size_up=50, mode="triangular2"),
     S.cyclic_lr(0.01, max_lr=0.1, step_size_up=50, mode="triangular2"), None, "no optax counterpart"),
    ("SequentialLR(LinearLR(0.01, total_iters=50), CosineAnnealingLR(950), milestones=[50])",
     lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.01, total_iters=50), L.CosineAnnealingLR(o, 950)], milestones=[50]),
     S.sequential_lr(BASE, schedulers=[S.linear_lr(BASE, start_factor=0.01, total_iters=50), S.cosine_annealing_lr(BASE, T_max=950)], milestones=[50]),
     optax.join_schedules([optax.linear_schedule(BASE * 0.01, BASE, 50), optax.cosine_decay_schedule(BASE, 950)], [50]), ""),
    ("ChainedScheduler(ExponentialLR(0.999), StepLR(100, 0.5))",
     lambda o: L.ChainedScheduler([L.ExponentialLR(o, 0.999), L.StepLR(o, 100, 0.5)]),
     S.chained_scheduler(BASE, schedulers=[S.exponential_lr(BASE, gamma=0.999), S.step_lr(BASE, step_size=100, gamma=0.5)]),
     lambda c: BASE * 0.999**c * 0.5 ** (c // 100), "optax: the product of closed forms"),
]


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}"


def scheduler_section() -> str:
    """Markdown lines: one row per scheduler, exactness of ours (host, jit) and the optax port."""
    ks = np.arange(STEPS)
    jit_values = {}
    lines = [
        "## LR schedulers",
        "",
        f"torch's `param_groups[0]['lr']` after k `scheduler.step()` calls, k = 0..{STEPS - 1}, base lr {BASE}, against "
        "`jax_impl.optim.lr_scheduler` evaluated on the host (Python floats: what jax_impl optimizers use) and under "
        "`jax.jit` (a traced k, float32 result), and against the nearest optax schedule (float32).",
        "",
        "| scheduler | ours, host: max abs err | ours, jit: max ULP vs float32(torch) | optax port: max abs err | optax: max rel err | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, make_torch, ours, port, note in CASES:
        ref = _torch_lrs(make_torch)
        host = np.array([ours(int(k)) for k in ks], dtype=np.float64)
        traced = jax.jit(jax.vmap(lambda k, s=ours: s(k)))(jnp.asarray(ks, jnp.int32))
        jit_values[label] = traced
        jit_ulp = int(ulp_distance(np.asarray(traced, np.float32), ref.astype(np.float32)).max())
        if port is None:
            port_abs = port_rel = "—"
        else:
            got = np.array([float(port(int(k))) for k in ks], dtype=np.float64)
            err = np.abs(got - ref)
            port_abs = _fmt(float(err.max()))
            scale = np.maximum(np.abs(ref), np.abs(got))
            port_rel = _fmt(float(np.max(np.where(scale > 0, err / np.where(scale > 0, scale, 1), 0))))
        lines.append(f"| `{label}` | {_fmt(float(np.abs(host - ref).max()))} | {jit_ulp} | {port_abs} | {port_rel} | {note} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(scheduler_section())
