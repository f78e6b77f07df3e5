"""Generate docs/parity.md: how close jax_impl.optim and naive optax ports come to torch.optim.

    python docs/generate_parity.py [--out docs/parity.md] [--steps 1000]

For every optimizer and two configs (torch's defaults, and one exercising its
options) the script runs real ``torch.optim`` on CPU and, on the same initial
parameters and the same seeded normal gradients,

- (a) ``jax_impl.optim`` with the sqrt torch was probed to use,
- (b) ``jax_impl.optim`` with IEEE ``sqrt`` (what the MKL emulation buys),
- (c) the optax code a porter would write,

and tabulates the agreement of the parameters. Everything in parity.md is
produced here; edit this script, not the Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
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
from parity import compare
from parity.numerics import strict_numerics

SHAPES = {"weight": (64, 32), "bias": (64,), "kernel": (8, 4, 3, 3)}
F64_STEPS = 200


# --- the naive optax ports -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Port:
    """An optax transformation a porter would write, with the code that builds it."""

    text: str
    build: Callable[[], optax.GradientTransformation]


def call(name: str, *args: Any, **kwargs: Any) -> Port:
    """``optax.<name>(*args, **kwargs)``, with its source text."""
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return Port(f"optax.{name}({', '.join(shown)})", lambda: getattr(optax, name)(*args, **kwargs))


def with_weight_decay(wd: float, port: Port) -> Port:
    """torch's coupled L2 (``g + wd * p``) as a porter adds it: ``add_decayed_weights`` first."""
    if not wd:
        return port
    return Port(f"chain(add_decayed_weights({wd!r}), {port.text})", lambda: optax.chain(optax.add_decayed_weights(wd), port.build()))


def negated(port: Port) -> Port:
    """``maximize=True`` as a porter writes it: negate the gradient first."""
    return Port(f"chain(scale(-1), {port.text})", lambda: optax.chain(optax.scale(-1.0), port.build()))


def adagrad_lr(lr: float, lr_decay: float) -> Callable[[Any], Any]:
    return lambda count: lr / (1 + count * lr_decay)


@dataclasses.dataclass(frozen=True)
class Case:
    torch_cls: str
    kwargs: dict[str, Any]
    ports: tuple[Port, ...]
    note: str = ""

    @property
    def jax_name(self) -> str:
        return self.torch_cls.lower()

    @property
    def config_text(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) or "defaults"


RMS_OPTS = dict(lr=1e-2, alpha=0.9, momentum=0.9, centered=True, weight_decay=0.1)
ADAGRAD_OPTS = dict(lr=0.05, lr_decay=1e-2, initial_accumulator_value=0.1, eps=1e-8, weight_decay=0.1)
ASGD_NOTE = "optax has no ASGD; plain SGD ignores the decaying eta, the lambd shrinkage and the average `ax`."

CASES = [
    Case("SGD", {}, (call("sgd", 1e-3),)),
    Case("SGD", dict(lr=0.05, momentum=0.9, weight_decay=1e-2, nesterov=True),
         (with_weight_decay(1e-2, call("sgd", 0.05, momentum=0.9, nesterov=True)),)),
    Case("Adam", {}, (call("adam", 1e-3),)),
    Case("Adam", dict(lr=1e-2, weight_decay=1e-2, amsgrad=True), (with_weight_decay(1e-2, call("amsgrad", 1e-2)),)),
    Case("AdamW", {}, (call("adamw", 1e-3, weight_decay=1e-2),)),
    Case("AdamW", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
         (call("adamw", 1e-2, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1),)),
    Case("RMSprop", {}, (call("rmsprop", 1e-2), call("rmsprop", 1e-2, decay=0.99, eps=1e-8, eps_in_sqrt=False))),
    Case("RMSprop", RMS_OPTS, (
        with_weight_decay(0.1, call("rmsprop", 1e-2, centered=True, momentum=0.9)),
        with_weight_decay(0.1, call("rmsprop", 1e-2, decay=0.9, eps=1e-8, eps_in_sqrt=False, centered=True, momentum=0.9)),
    )),
    Case("Adagrad", {}, (call("adagrad", 1e-2, initial_accumulator_value=0.0, eps=1e-10),)),
    Case("Adagrad", ADAGRAD_OPTS, (with_weight_decay(0.1, Port(
        "optax.adagrad(lambda k: 0.05 / (1 + k * 0.01), initial_accumulator_value=0.1, eps=1e-08)",
        lambda: optax.adagrad(adagrad_lr(0.05, 1e-2), initial_accumulator_value=0.1, eps=1e-8))),)),
    Case("Adamax", {}, (call("adamax", 2e-3),)),
    Case("Adamax", dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1), (with_weight_decay(0.1, call("adamax", 1e-2, b1=0.8, b2=0.99)),)),
    Case("NAdam", {}, (call("nadam", 2e-3),)),
    Case("NAdam", dict(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=8e-3),
         (call("nadamw", 1e-2, weight_decay=0.1),)),
    Case("RAdam", {}, (call("radam", 1e-3),)),
    Case("RAdam", dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1), (with_weight_decay(0.1, call("radam", 1e-2, b1=0.8, b2=0.99)),)),
    Case("Adadelta", {}, (call("adadelta", learning_rate=1.0),)),
    Case("Adadelta", dict(lr=0.5, rho=0.95, eps=1e-5, weight_decay=0.1),
         (call("adadelta", learning_rate=0.5, rho=0.95, eps=1e-5, weight_decay=0.1),)),
    Case("ASGD", {}, (call("sgd", 1e-2),), ASGD_NOTE),
    Case("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.75, t0=20.0, weight_decay=1e-3),
         (with_weight_decay(1e-3, call("sgd", 0.05)),), ASGD_NOTE),
    Case("Rprop", {}, (call("rprop", 1e-2),)),
    Case("Rprop", dict(lr=0.1, etas=(0.3, 1.5), step_sizes=(1e-3, 0.5), maximize=True),
         (negated(call("rprop", 0.1, eta_minus=0.3, eta_plus=1.5, min_step_size=1e-3, max_step_size=0.5)),)),
]


# --- running both sides ----------------------------------------------------------------------------


def make_problem(dtype: str, steps: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Initial params and a (steps, *shape) stack of seeded normal gradients per leaf."""
    rng = np.random.default_rng(seed)
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    grads = {k: rng.standard_normal((steps, *s)).astype(dtype) for k, s in SHAPES.items()}
    return params, grads


def run_torch(case: Case, params0: dict, grads: dict, checkpoints: set[int]) -> dict[int, dict[str, np.ndarray]]:
    tensors = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params0.items()}
    opt = getattr(torch.optim, case.torch_cls)(list(tensors.values()), **case.kwargs)
    steps = max(checkpoints)
    snaps = {}
    for i in range(steps):
        for k, p in tensors.items():
            p.grad = torch.from_numpy(grads[k][i])
        opt.step()
        if i + 1 in checkpoints:
            snaps[i + 1] = {k: p.detach().numpy().copy() for k, p in tensors.items()}
    return snaps


def run_jax(tx: Any, exact: bool, params0: dict, grads: dict, checkpoints: set[int]) -> dict[int, dict[str, np.ndarray]]:
    if exact:
        fn = tx.step
    else:
        def fn(g, s, p):
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s

    stepper = jax.jit(fn)
    params = {k: jnp.asarray(v) for k, v in params0.items()}
    state = tx.init(params)
    snaps = {}
    for i in range(max(checkpoints)):
        params, state = stepper({k: g[i] for k, g in grads.items()}, state, params)
        if i + 1 in checkpoints:
            snaps[i + 1] = {k: np.asarray(v) for k, v in params.items()}
    return snaps


def build_ours(case: Case, mode: str) -> Any:
    jopt.set_sqrt_mode(mode)  # captured when the optimizer is built
    return getattr(jopt, case.jax_name)(**case.kwargs)


@dataclasses.dataclass
class Row:
    label: str
    ulp1: int
    rel: dict[int, float]
    identical: float
    rel_f64: float | None = None


def agreement(ref: dict, got: dict) -> tuple[int, float, float]:
    report = compare(ref, got)
    numel = sum(leaf.numel for leaf in report.leaves)
    identical = sum(leaf.frac_identical * leaf.numel for leaf in report.leaves) / numel
    return report.max_ulp, report.max_rel, identical


def row(label: str, ref: dict, got: dict, steps: int, mid: int) -> Row:
    ulp1, _, _ = agreement(ref[1], got[1])
    _, rel_mid, _ = agreement(ref[mid], got[mid])
    _, rel_end, identical = agreement(ref[steps], got[steps])
    return Row(label, ulp1, {mid: rel_mid, steps: rel_end}, identical)


def run_case(case: Case, problem32, problem64, probed: str, steps: int, mid: int) -> list[Row]:
    checkpoints = {1, mid, steps}
    modes = [(f"jax_impl.optim ({probed} sqrt)", probed)]
    if probed != "ieee":
        modes.append(("jax_impl.optim (IEEE sqrt)", "ieee"))
    with strict_numerics(seed=0, match_sqrt=False):  # build_ours sets the mode per row
        ref = run_torch(case, *problem32, checkpoints)
        rows = [row(label, ref, run_jax(build_ours(case, mode), True, *problem32, checkpoints), steps, mid) for label, mode in modes]
        rows += [row(port.text, ref, run_jax(port.build(), False, *problem32, checkpoints), steps, mid) for port in case.ports]
    with strict_numerics(seed=0, x64=True, match_sqrt=False):
        ref64 = run_torch(case, *problem64, {F64_STEPS})
        for r, (_, mode) in zip(rows, modes):
            got = run_jax(build_ours(case, mode), True, *problem64, {F64_STEPS})
            r.rel_f64 = agreement(ref64[F64_STEPS], got[F64_STEPS])[1]
    return rows


# --- Markdown --------------------------------------------------------------------------------------


def fmt_rel(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}"


def fmt_frac(x: float) -> str:
    return "100%" if x == 1 else f"{100 * x:.2f}%"


def environment(probed: str) -> list[str]:
    cpu = platform.processor() or "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return [
        f"- Generated: {datetime.date.today().isoformat()}",
        f"- Versions: torch {torch.__version__}, jax {jax.__version__}, optax {optax.__version__}, numpy {np.__version__}, Python {platform.python_version()}",
        f"- CPU: {cpu} ({platform.machine()}, torch CPU capability {torch.backends.cpu.get_cpu_capability()})",
        f"- torch's CPU `sqrt`, as probed by `parity.numerics.probe_torch_sqrt()`: **{probed}**",
    ]


def render(results: list[tuple[Case, list[Row]]], probed: str, steps: int, mid: int, elapsed: float) -> str:
    n = sum(int(np.prod(s)) for s in SHAPES.values())
    tree = ", ".join(f"`{k}` {s}" for k, s in SHAPES.items())
    out = [
        "# Parity with torch: optimizers and LR schedulers (jax_impl vs naive optax ports)",
        "",
        "<!-- Generated by docs/generate_parity.py. Do not edit by hand; rerun the script. -->",
        "",
        "*This file is generated by `python docs/generate_parity.py`; edits will be overwritten.*",
        "",
        *environment(probed),
        "",
        "## Setup",
        "",
        f"A tree of {len(SHAPES)} float32 leaves ({tree}; {n} values) with standard-normal initial values is",
        f"stepped {steps} times by real `torch.optim` (CPU, default single-tensor path) and, from the same",
        "initial values with the same seeded standard-normal gradients (independent of the parameters), by:",
        "",
        f"- **jax_impl.optim ({probed} sqrt)**: this project, with the `sqrt` torch was probed to use.",
        "- **jax_impl.optim (IEEE sqrt)**: the same with `set_sqrt_mode(\"ieee\")`, i.e. without the emulation of",
        "  MKL's AVX-512 `vsSqrt`; the difference to the row above is what that emulation buys."
        if probed != "ieee" else "- (torch's sqrt is IEEE here, so the IEEE-sqrt row would repeat the row above and is left out.)",
        "- **optax...**: the optax code a porter would write, applied with `update` + `optax.apply_updates`.",
        "  Coupled weight decay is `add_decayed_weights` chained in front, `maximize` a `scale(-1)`.",
        "",
        "jax_impl rows use the exact `step` method under `jax.jit`. Columns:",
        "",
        "- **ULP @1**: the largest distance, in float32 units in the last place, between a parameter after",
        "  one step and torch's (0 = bit-identical).",
        f"- **max rel @{mid}**, **max rel @{steps}**: the largest `|ours - torch| / max(|ours|, |torch|)` over",
        "  all parameters after that many steps. Rounding differences compound over steps; algorithmic",
        "  differences show up as errors of order 1e-3 and above.",
        f"- **identical @{steps}**: the fraction of all {n} parameters bit-identical to torch's after {steps} steps.",
        f"- **f64 max rel @{F64_STEPS}**: the same as max rel, for the jax_impl rows only, with float64",
        f"  parameters and gradients (`jax_enable_x64`) after {F64_STEPS} steps.",
        "",
        "## Summary",
        "",
        f"Fraction of parameters bit-identical to torch after {steps} float32 steps (for the optax column: the",
        "best of the ports listed below).",
        "",
        f"| optimizer | config | jax_impl ({probed} sqrt) | jax_impl (IEEE sqrt) | best naive optax |",
        "|---|---|---:|---:|---:|",
    ]
    for case, rows in results:
        ours = [r for r in rows if r.label.startswith("jax_impl")]
        ieee = ours[-1] if len(ours) > 1 else ours[0]
        best = max(r.identical for r in rows[len(ours):])
        out.append(f"| {case.torch_cls} | {case.config_text} | {fmt_frac(ours[0].identical)} | {fmt_frac(ieee.identical)} | {fmt_frac(best)} |")
    current = None
    for case, rows in results:
        if case.torch_cls != current:
            current = case.torch_cls
            out += ["", f"## {current}", ""]
        out += [
            f"`torch.optim.{case.torch_cls}({case.config_text})`" + (f" — {case.note}" if case.note else ""),
            "",
            f"| implementation | ULP @1 | max rel @{mid} | max rel @{steps} | identical @{steps} | f64 max rel @{F64_STEPS} |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            label = r.label if r.label.startswith("jax_impl") else f"`{r.label}`"
            f64 = "—" if r.rel_f64 is None else fmt_rel(r.rel_f64)
            out.append(f"| {label} | {r.ulp1} | {fmt_rel(r.rel[mid])} | {fmt_rel(r.rel[steps])} | {fmt_frac(r.identical)} | {f64} |")
        out.append("")
    out += ["---", "", f"Generated in {elapsed:.0f} s."]
    return "\n".join(out) + "\n"


LAYERS_BEGIN = "<!-- layers-and-models: generated by docs/parity_layers.py -->"
LAYERS_END = "<!-- end layers-and-models -->"
CONFIGS_BEGIN = "<!-- configs: generated by docs/parity_configs.py -->"
CONFIGS_END = "<!-- end configs -->"


def _replace_section(out: Path, begin: str, end: str, body: Callable[[], str], what: str) -> int:
    """Replace (or append) the text between ``begin`` and ``end`` in ``out`` with ``body()``."""
    start = time.perf_counter()
    block = f"{begin}\n{body()}{end}\n"
    text = out.read_text() if out.exists() else ""
    if begin in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n") if end in rest else ""
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    out.write_text(text)
    print(f"wrote the {what} of {out} in {time.perf_counter() - start:.0f} s")
    return 0


def write_layer_sections(out: Path) -> int:
    """Replace (or append) the layers and models sections of ``out``."""
    from parity_layers import layers_section, models_section  # docs/parity_layers.py, beside this script

    return _replace_section(out, LAYERS_BEGIN, LAYERS_END, lambda: f"{layers_section()}\n{models_section()}",
                            "layers and models sections")


def write_config_section(out: Path) -> int:
    """Replace (or append) the configs section of ``out`` (runs every config in configs/: minutes)."""
    from parity_configs import configs_section  # docs/parity_configs.py, beside this script

    return _replace_section(out, CONFIGS_BEGIN, CONFIGS_END, configs_section, "configs section")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "parity.md")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--mid", type=int, default=200, help="the intermediate checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only", choices=["layers", "configs"], default=None,
        help="regenerate only the layers and models sections, or the configs section (between their markers)",
    )
    args = parser.parse_args(argv)
    if args.only == "layers":
        return write_layer_sections(args.out)
    if args.only == "configs":
        return write_config_section(args.out)

    start = time.perf_counter()
    saved_mode = jopt.get_sqrt_mode()
    with strict_numerics(seed=0):
        probed = jopt.get_sqrt_mode()  # strict_numerics probed torch and set it
    problem32 = make_problem("float32", args.steps, args.seed)
    problem64 = make_problem("float64", F64_STEPS, args.seed)
    results = []
    try:
        for case in CASES:
            t = time.perf_counter()
            results.append((case, run_case(case, problem32, problem64, probed, args.steps, args.mid)))
            print(f"{case.torch_cls:9s} {case.config_text:70.70s} {time.perf_counter() - t:5.1f} s", flush=True)
    finally:
        jopt.set_sqrt_mode(saved_mode)
    from parity_schedulers import scheduler_section  # docs/parity_schedulers.py, beside this script

    schedulers = scheduler_section()
    args.out.write_text(render(results, probed, args.steps, args.mid, time.perf_counter() - start) + "\n" + schedulers)
    write_layer_sections(args.out)
    write_config_section(args.out)
    cuda_json = Path(__file__).parent / "parity_cuda.json"  # measured on a GPU machine: docs/parity_cuda.py
    if cuda_json.is_file():
        from parity_cuda import write_section

        write_section(cuda_json, args.out)
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
