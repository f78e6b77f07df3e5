"""Time one optimizer update of a ResNet-18-shaped float32 tree: jax_impl.optim vs optax vs torch.

    python benchmarks/optim_update.py [--repeats N] [--json PATH] [--only adam,sgd] [--device cpu|cuda]

For each optimizer the same 11.7M-parameter tree (ResNet-18's 62 leaves:
conv kernels, BatchNorm weights/biases, fc) is stepped by

- ``step[mkl]`` / ``step[ieee]``: ``jax_impl.optim.<name>(...).step`` (the
  exact path), built under each sqrt mode (``set_sqrt_mode``);
- ``update``: our ``update`` followed by ``optax.apply_updates``;
- ``optax``: the nearest optax built-in, ``update`` + ``apply_updates``;
- ``torch``: ``torch.optim.<Name>.step()`` on CPU, single-tensor path
  (``foreach=False``, torch's CPU default).

On a GPU (``--device cuda``, JSON to ``results/optim_update_cuda.json``)
torch's tensors live on the GPU and it takes its CUDA default, the
multi-tensor ``foreach`` path; every torch call ends with
``torch.cuda.synchronize()``. JAX runs on its default (GPU) device.

Every JAX variant is one ``jax.jit`` with the state and params donated and
the gradients passed as an argument (so XLA cannot constant-fold them). Each
variant is warmed up (compilation included), then the four JAX variants are
timed round-robin ``--repeats`` times (``block_until_ready`` after each call),
so drift in the machine's speed hits all alike, and torch after them on its own
(interleaving torch's OpenMP pool with XLA's thread pool slows both). The
table and JSON report medians.

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from jax_impl import optim as jopt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results" / "optim_update.json"
DEFAULT_JSON_CUDA = Path(__file__).parent / "results" / "optim_update_cuda.json"


def resnet18_shapes() -> dict[str, tuple[int, ...]]:
    """torchvision ResNet-18's parameter names and shapes (62 leaves, 11,689,512 values)."""
    shapes: dict[str, tuple[int, ...]] = {"conv1.weight": (64, 3, 7, 7), "bn1.weight": (64,), "bn1.bias": (64,)}
    in_ch = 64
    for layer, (ch, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            prefix = f"layer{layer}.{block}."
            cin = in_ch if block == 0 else ch
            shapes[prefix + "conv1.weight"] = (ch, cin, 3, 3)
            shapes[prefix + "bn1.weight"] = shapes[prefix + "bn1.bias"] = (ch,)
            shapes[prefix + "conv2.weight"] = (ch, ch, 3, 3)
            shapes[prefix + "bn2.weight"] = shapes[prefix + "bn2.bias"] = (ch,)
            if block == 0 and (stride != 1 or cin != ch):
                shapes[prefix + "downsample.0.weight"] = (ch, cin, 1, 1)
                shapes[prefix + "downsample.1.weight"] = shapes[prefix + "downsample.1.bias"] = (ch,)
        in_ch = ch
    shapes["fc.weight"] = (1000, 512)
    shapes["fc.bias"] = (1000,)
    assert len(shapes) == 62 and sum(int(np.prod(s)) for s in shapes.values()) == 11_689_512
    return shapes


@dataclasses.dataclass(frozen=True)
class Case:
    """One optimizer: torch's class and kwargs, and the optax built-in a porter would reach for."""

    name: str
    torch_cls: str
    kwargs: dict[str, Any]
    optax_tx: Callable[[], optax.GradientTransformation]
    optax_text: str


CASES = [
    Case("sgd", "SGD", dict(lr=1e-2, momentum=0.9), lambda: optax.sgd(1e-2, momentum=0.9), "optax.sgd(1e-2, momentum=0.9)"),
    Case("adam", "Adam", dict(lr=1e-3), lambda: optax.adam(1e-3), "optax.adam(1e-3)"),
    Case("adamw", "AdamW", dict(lr=1e-3), lambda: optax.adamw(1e-3, weight_decay=1e-2), "optax.adamw(1e-3, weight_decay=1e-2)"),
    Case("rmsprop", "RMSprop", dict(lr=1e-2), lambda: optax.rmsprop(1e-2), "optax.rmsprop(1e-2)"),
    Case("adagrad", "Adagrad", dict(lr=1e-2), lambda: optax.adagrad(1e-2), "optax.adagrad(1e-2)"),
    Case("adamax", "Adamax", dict(lr=2e-3), lambda: optax.adamax(2e-3), "optax.adamax(2e-3)"),
    Case("nadam", "NAdam", dict(lr=2e-3), lambda: optax.nadam(2e-3), "optax.nadam(2e-3)"),
    Case("radam", "RAdam", dict(lr=1e-3), lambda: optax.radam(1e-3), "optax.radam(1e-3)"),
    Case("adadelta", "Adadelta", dict(lr=1.0), lambda: optax.adadelta(learning_rate=1.0), "optax.adadelta(learning_rate=1.0)"),
    # optax has no averaged SGD; SGD with momentum is the built-in with the same state (one
    # full-size buffer besides the parameters: 5 array passes per update, plain SGD's 3).
    Case("asgd", "ASGD", dict(lr=1e-2), lambda: optax.sgd(1e-2, momentum=0.9), "optax.sgd(1e-2, momentum=0.9)"),
    Case("rprop", "Rprop", dict(lr=1e-2), lambda: optax.rprop(1e-2), "optax.rprop(1e-2)"),
]

VARIANTS = ("step[mkl]", "step[ieee]", "update", "optax", "torch")


def time_interleaved(calls: dict[str, Callable[[], None]], *, warmup: int, repeats: int) -> dict[str, dict[str, Any]]:
    """Warm up every call, then time them round-robin, so that drift in the machine's speed
    (shared hosts, turbo, other processes) hits every variant alike. Each call blocks until done."""
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


def jax_stepper(tx: Any, params: dict, grads: dict, *, exact: bool) -> Callable[[], None]:
    """A no-argument call doing one jitted, donated update of a private copy of ``params``."""
    # Arguments in the order of the results: JAX pairs each donated input with the first
    # unclaimed output of the same shape and dtype, so ``(g, s, p) -> (p, s)`` would alias
    # each parameter's output to a *state* buffer of the same shape and XLA would add a copy
    # of every parameter and every state leaf (a train step ``(params, opt_state, ...) ->
    # (params, opt_state)`` aliases each buffer to itself, as here).
    if exact:
        def step(g, p, s):
            return tx.step(g, s, p)
    else:
        def step(g, p, s):
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s

    jitted = jax.jit(step, donate_argnums=(1, 2))
    box = {"p": jax.tree.map(jnp.copy, params)}
    box["s"] = tx.init(box["p"])

    def call() -> None:
        box["p"], box["s"] = jitted(grads, box["p"], box["s"])
        jax.block_until_ready(box["p"])

    return call


def torch_foreach(device: str) -> bool:
    """The update path torch takes by default on ``device``: single-tensor on CPU, ``foreach`` on CUDA.

    Spelled out when building the optimizer, so that a change of torch's default cannot move the baseline.
    """
    return device == "cuda"


def torch_stepper(case: Case, params: dict[str, np.ndarray], grads: dict[str, np.ndarray], device: str = "cpu") -> Callable[[], None]:
    tensors = [torch.nn.Parameter(torch.from_numpy(v.copy()).to(device)) for v in params.values()]
    for p, g in zip(tensors, grads.values()):
        p.grad = torch.from_numpy(g).to(device)
    opt = getattr(torch.optim, case.torch_cls)(tensors, foreach=torch_foreach(device), **case.kwargs)
    if device == "cpu":
        return opt.step

    def call() -> None:
        opt.step()
        torch.cuda.synchronize()

    return call


def machine_info() -> dict[str, Any]:
    """The shared machine description (benchmarks/_common.py) and optax's version."""
    return {**_common.machine_info(), "optax": optax.__version__}


def run_case(case: Case, params_np: dict, grads_np: dict, *, warmup: int, repeats: int, device: str = "cpu") -> dict[str, Any]:
    params = {k: jnp.asarray(v) for k, v in params_np.items()}
    grads = {k: jnp.asarray(v) for k, v in grads_np.items()}
    saved_mode = jopt.get_sqrt_mode()
    calls: dict[str, Callable[[], None]] = {}
    try:
        for variant, mode, exact in (("step[mkl]", "mkl-avx512", True), ("step[ieee]", "ieee", True), ("update", "mkl-avx512", False)):
            jopt.set_sqrt_mode(mode)  # captured when the optimizer is built
            calls[variant] = jax_stepper(getattr(jopt, case.name)(**case.kwargs), params, grads, exact=exact)
    finally:
        jopt.set_sqrt_mode(saved_mode)
    calls["optax"] = jax_stepper(case.optax_tx(), params, grads, exact=False)
    times = time_interleaved(calls, warmup=warmup, repeats=repeats)
    # torch on its own: its OpenMP workers and XLA's thread pool spin-wait after work and steal
    # each other's cores when interleaved (measured: torch's SGD step ~25x slower).
    times.update(time_interleaved({"torch": torch_stepper(case, params_np, grads_np, device)}, warmup=warmup, repeats=repeats))
    return times


def ratios(res: dict[str, Any]) -> dict[str, float]:
    med = {k: v["median_ms"] for k, v in res.items()}
    return {
        "step_mkl/optax": med["step[mkl]"] / med["optax"],
        "step_ieee/optax": med["step[ieee]"] / med["optax"],
        "update/optax": med["update"] / med["optax"],
        "torch/step_mkl": med["torch"] / med["step[mkl]"],
    }


def print_table(results: dict[str, Any], probed: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"One update of a ResNet-18 tree (11.7M float32), median ms; torch's sqrt probed: {probed}")
    table.add_column("optimizer")
    for variant in VARIANTS:
        table.add_column(escape(variant), justify="right")
    for name in ("step[mkl]/optax", "step[ieee]/optax", "update/optax", "torch/step[mkl]"):
        table.add_column(escape(name), justify="right")
    for name, entry in results.items():
        med = [entry["times"][v]["median_ms"] for v in VARIANTS]
        r = entry["ratios"]
        cells = [f"{m:.1f}" for m in med]
        flagged = [f"[red]{x:.2f}[/red]" if x > 1.1 else f"{x:.2f}" for x in (r["step_mkl/optax"], r["step_ieee/optax"], r["update/optax"])]
        table.add_row(name, *cells, *flagged, f"{r['torch/step_mkl']:.2f}")
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40, help="timed calls per variant (>= 15 recommended; 40 by default: the shared host moves single medians by 10-40%%)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first (the first compiles)")
    parser.add_argument("--json", type=Path, default=None,
                        help=f"where to write results (default {DEFAULT_JSON}, with --device cuda {DEFAULT_JSON_CUDA})")
    parser.add_argument("--only", default="", help="comma-separated optimizer names (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where torch runs (JAX: its default device)")
    args = parser.parse_args(argv)
    if args.json is None:
        args.json = DEFAULT_JSON_CUDA if args.device == "cuda" else DEFAULT_JSON
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if args.repeats < 15:
        print(f"warning: --repeats {args.repeats} < 15; medians will be noisy", file=sys.stderr)

    from parity.numerics import probe_torch_sqrt

    probed = probe_torch_sqrt()
    rng = np.random.default_rng(args.seed)
    shapes = resnet18_shapes()
    params_np = {k: rng.standard_normal(s, dtype=np.float32) * np.float32(0.05) for k, s in shapes.items()}
    grads_np = {k: rng.standard_normal(s, dtype=np.float32) * np.float32(1e-2) for k, s in shapes.items()}

    only = {n.strip() for n in args.only.split(",") if n.strip()}
    results: dict[str, Any] = {}
    for case in CASES:
        if only and case.name not in only:
            continue
        times = run_case(case, params_np, grads_np, warmup=args.warmup, repeats=args.repeats, device=args.device)
        results[case.name] = {
            "torch": f"torch.optim.{case.torch_cls}(params, foreach={torch_foreach(args.device)}, **{case.kwargs})",
            "optax": case.optax_text,
            "times": times,
            "ratios": ratios(times),
        }
        summary = "  ".join(f"{v} {times[v]['median_ms']:.1f}" for v in VARIANTS)
        print(f"{case.name:9s} {summary}", flush=True)

    print_table(results, probed)
    payload = {
        "benchmark": "optim_update",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "device": args.device,
        "torch_sqrt_probed": probed,
        "tree": {"shapes": "resnet18", "leaves": len(shapes), "numel": int(sum(np.prod(s) for s in shapes.values())), "dtype": "float32"},
        "protocol": {
            "warmup": args.warmup,
            "repeats": args.repeats,
            "statistic": "median", "order": "JAX variants round-robin within each repeat; torch timed separately afterwards",
            "jax": "jax.jit(step(grads, params, state) -> (params, state), donate_argnums=(params, state)): every donated buffer aliases its own output; grads as a jit argument; block_until_ready",
            "torch": ("optimizer.step() with .grad set once; CPU single-tensor path" if args.device == "cpu" else
                      "optimizer.step() with .grad set once, on the GPU; multi-tensor (foreach) path; torch.cuda.synchronize()"),
        },
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
