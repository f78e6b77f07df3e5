"""Training and inference throughput at the sizes people train at on a GPU: torch eager, torch.compile, jax_impl.

    python benchmarks/gpu_throughput.py [--json PATH] [--only CASES] [--budget-s S] [--smoke]

Cases (random data, CrossEntropyLoss, SGD lr=0.01 momentum=0.9, the model in
train mode for ``train`` and eval mode for ``infer``):

- ``resnet18_cifar_b512``: ResNet-18 (10 classes) on 3x32x32, batch 512;
- ``resnet50_b128_224``: ResNet-50 (1000 classes) on 3x224x224, batch 128;
- ``vit_tiny_b256_224``: ViT-Ti/16 (``torch_ref.models.vit_tiny``: 12 pre-norm
  ``nn.TransformerEncoderLayer`` layers of width 192) on 3x224x224, batch 256.

Precisions: ``float32`` (TF32 off on both sides: the parity setting),
``tf32`` (torch's ``torch.backends.cuda.matmul.allow_tf32`` and
``torch.backends.cudnn.allow_tf32`` on; jax_impl's switches of the same
names, ``jax_impl.backends.cuda`` and ``jax_impl.backends.cudnn``, on) and
``bf16`` (``torch.autocast("cuda", torch.bfloat16)`` against
``jax_impl.train.train_step(..., autocast=jnp.bfloat16)``, which follows
torch's CPU autocast lists; parameters stay float32 on both sides).

Frameworks, each (case, precision) in a fresh process so that its peak
memory is its own:

- ``torch``: eager, NCHW, ``cudnn.benchmark = True`` (XLA autotunes its
  convolutions, so torch gets its autotuner too);
- ``torch_compile``: ``torch.compile(model)`` (default mode), the optimizer
  step eager;
- ``jax``: ``jax_impl.train.train_step`` (batch an argument, state donated)
  and one jitted eval forward.

Reported per (case, precision, framework, mode): images per second (batch x
steps / seconds, over blocks of back-to-back steps each ending with one
device synchronisation, the median block), and memory in MiB: torch's
``max_memory_allocated`` over the timed steps (reset after warm-up), JAX's
device ``peak_bytes_in_use`` right after compiling and after the steps (the
allocator's peak since the process started, which cannot be reset), with
XLA's ``memory_analysis()`` of the compiled step (arguments, outputs,
temporaries). One extra JAX run per case repeats float32 training with
``XLA_FLAGS=--xla_gpu_autotune_level=0`` to show what convolution autotuning
adds to the peak.

``--budget-s`` stops starting new processes once that many seconds have
passed; what was not run is listed under ``skipped``. ``--smoke`` runs every
path on a tiny batch on whatever device exists (a check of this script, not
a measurement). This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from _common import machine_info, write_json  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results" / "gpu_throughput.json"
CASES: dict[str, dict[str, Any]] = {
    "resnet18_cifar_b512": dict(model="resnet18", batch=512, image=32, classes=10),
    "resnet50_b128_224": dict(model="resnet50", batch=128, image=224, classes=1000),
    "vit_tiny_b256_224": dict(model="vit_tiny", batch=256, image=224, classes=1000),
}
SMOKE = dict(batch=2, image=32)
PRECISIONS = ("float32", "tf32", "bf16")
LR, MOMENTUM = 0.01, 0.9
BLOCKS, STEPS, WARMUP = 5, 10, 3
MIB = 2 ** 20
AUTOTUNE_OFF = "--xla_gpu_autotune_level=0"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _size(case: dict[str, Any]) -> dict[str, int]:
    """The image size a model is built for: a ViT's position embeddings depend on it, a ResNet's do not."""
    return {"image_size": case["image"]} if case["model"].startswith("vit") else {}


def _commit() -> str:
    """The repository's commit (short), or ``""`` outside a git checkout."""
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _key(run: dict[str, Any]) -> tuple[str, ...]:
    return run["framework"], run["case"], run["precision"], json.dumps(run.get("env") or {}, sort_keys=True)


def _data(case: dict[str, Any]):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((case["batch"], 3, case["image"], case["image"]), dtype=np.float32)
    return x, rng.integers(0, case["classes"], case["batch"]).astype(np.int64)


def _throughput(call, sync, batch: int, blocks: int, steps: int) -> dict[str, Any]:
    """Images per second over ``blocks`` blocks of ``steps`` back-to-back calls, each block ending with ``sync``."""
    rates = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(steps):
            out = call()
        sync(out)
        rates.append(batch * steps / (time.perf_counter() - start))
    rates.sort()
    return {"images_per_s": rates[len(rates) // 2], "images_per_s_all": rates, "steps": blocks * steps}


def probe_torch(case: dict[str, Any], precision: str, *, compiled: bool, blocks: int, steps: int) -> dict[str, Any]:
    import torch

    from torch_ref import models

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    model = getattr(models, case["model"])(num_classes=case["classes"], **_size(case)).to(device)
    run = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = _data(case)
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    cuda = device.type == "cuda"

    def sync(_out) -> None:
        if cuda:
            torch.cuda.synchronize()

    def train():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_fn(run(tx), ty)
        loss.backward()
        opt.step()
        return loss

    def infer():
        with torch.no_grad(), amp:
            return run(tx)

    out: dict[str, Any] = {}
    for mode, call, train_mode in (("train", train, True), ("infer", infer, False)):
        model.train(train_mode)
        start = time.perf_counter()
        for _ in range(WARMUP):
            call()
        sync(None)
        warm_s = time.perf_counter() - start
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        row = _throughput(call, sync, case["batch"], blocks, steps)
        row["warmup_s"] = warm_s
        if cuda:
            row["peak_mib"] = torch.cuda.max_memory_allocated() / MIB
        out[mode] = row
    return out


def probe_jax(case: dict[str, Any], precision: str, *, blocks: int, steps: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jax_impl import models, nn, optim
    from jax_impl.backends import cuda, cudnn
    from jax_impl.train import eval_step, init_train_state, train_step

    cuda.matmul.allow_tf32 = cudnn.allow_tf32 = precision == "tf32"  # read while the steps are traced, below
    autocast = jnp.bfloat16 if precision == "bf16" else None
    model = getattr(models, case["model"])(num_classes=case["classes"], rngs=nnx.Rngs(0), **_size(case))
    tx = optim.sgd(lr=LR, momentum=MOMENTUM)
    graphdef, state = init_train_state(model, tx)
    step = train_step(graphdef, nn.CrossEntropyLoss(), tx, donate=True, autocast=autocast)
    forward = eval_step(graphdef, autocast=autocast)
    x, y = _data(case)
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    device = jax.devices()[0]

    def stats() -> dict[str, float]:
        s = device.memory_stats() or {}
        return {k: s[k] / MIB for k in ("peak_bytes_in_use", "bytes_in_use") if k in s}

    def analysis(compiled) -> dict[str, float]:
        a = compiled.memory_analysis()
        if a is None:
            return {}
        return {k: getattr(a, k + "_in_bytes") / MIB for k in ("argument_size", "output_size", "temp_size")
                if hasattr(a, k + "_in_bytes")}

    out: dict[str, Any] = {"memory_at_start": stats()}
    box = {"state": state}
    compiled: dict[str, Any] = {}

    def train():
        box["state"], loss = compiled["train"](box["state"], jx, jy)
        return loss

    def infer():
        return compiled["infer"](box["state"], jx)

    def sync(value) -> None:
        jax.block_until_ready(value)

    for mode, fn, args, call in (("train", step, (state, jx, jy), train), ("infer", forward, (state, jx), infer)):
        start = time.perf_counter()
        compiled[mode] = fn.lower(*args).compile()
        compile_s = time.perf_counter() - start
        row: dict[str, Any] = {"compile_s": compile_s, "xla_memory_analysis": analysis(compiled[mode]),
                               "memory_after_compile": stats()}
        for _ in range(WARMUP):
            sync(call())
        row.update(_throughput(call, sync, case["batch"], blocks, steps))
        row["memory_after_steps"] = stats()
        row["peak_mib"] = row["memory_after_steps"].get("peak_bytes_in_use")
        out[mode] = row
    return out


def _probe_main(framework: str, name: str, precision: str, smoke: bool) -> int:
    case = dict(CASES[name], **(SMOKE if smoke else {}))
    blocks, steps = (1, 1) if smoke else (BLOCKS, STEPS)
    if framework == "jax":
        import jax_impl  # noqa: F401  (its XLA flags before jax's backend starts)

        result = probe_jax(case, precision, blocks=blocks, steps=steps)
    else:
        result = probe_torch(case, precision, compiled=framework == "torch_compile", blocks=blocks, steps=steps)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def _plan(names: list[str], frameworks: list[str]) -> list[tuple[str, str, str, dict[str, str]]]:
    """(framework, case, precision, extra env) in the order run: the comparisons that matter most first."""
    plan = []
    for precision in ("float32", "bf16", "tf32"):
        for name in names:
            for framework in ("jax", "torch"):
                if framework in frameworks:
                    plan.append((framework, name, precision, {}))
    if "jax" in frameworks:
        for name in names:
            plan.append(("jax", name, "float32", {"XLA_FLAGS": AUTOTUNE_OFF}))
    if "torch_compile" in frameworks:
        for precision in ("bf16", "float32"):
            for name in names:
                plan.append(("torch_compile", name, precision, {}))
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases: " + ", ".join(CASES))
    parser.add_argument("--frameworks", default="jax,torch,torch_compile")
    parser.add_argument("--budget-s", type=float, default=600.0, help="start no new process after this many seconds")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="one process's limit")
    parser.add_argument("--smoke", action="store_true", help="tiny batches on any device: check the script")
    parser.add_argument("--merge", type=Path, help="start from this earlier result: its runs stay unless run again "
                        "(another run on the same kind of machine, listed in the JSON's calls)")
    parser.add_argument("--runs", help="run only these, in this order: comma-separated FRAMEWORK:CASE:PRECISION, "
                        "with :autotune0 for XLA's autotuning off (default: the whole plan)")
    parser.add_argument("--probe", nargs=3, metavar=("FRAMEWORK", "CASE", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return _probe_main(*args.probe, smoke=args.smoke)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    results: dict[str, Any] = {"machine": machine_info(), "smoke": args.smoke, "cases": {n: CASES[n] for n in names},
                               "runs": [], "skipped": [], "calls": []}
    if args.merge:
        earlier = json.loads(args.merge.read_text())
        results.update(machine=earlier["machine"], cases={**earlier["cases"], **results["cases"]},
                       runs=earlier["runs"], skipped=earlier.get("skipped", []),
                       calls=earlier.get("calls") or [earlier["machine"].get("date", "")])
    results["calls"].append(_now())
    commit = _commit()
    plan = _plan(names, args.frameworks.split(","))
    if args.runs:
        plan = []
        for item in args.runs.split(","):
            parts = item.split(":")
            framework, name, precision, extra = *(parts + ["", "", ""])[:3], parts[3:]
            if (len(parts) < 3 or name not in CASES or precision not in PRECISIONS or framework not in ("jax", "torch", "torch_compile")
                    or extra not in ([], ["autotune0"])):
                parser.error(f"--runs: bad item {item!r}: FRAMEWORK:CASE:PRECISION[:autotune0], FRAMEWORK one of "
                             f"jax, torch, torch_compile, CASE one of {list(CASES)}, PRECISION one of {PRECISIONS}")
            plan.append((framework, name, precision, {"XLA_FLAGS": AUTOTUNE_OFF} if extra == ["autotune0"] else {}))
    start = time.perf_counter()
    for framework, name, precision, env in plan:
        label = {"framework": framework, "case": name, "precision": precision, "env": env}
        # A rerun replaces an earlier call's note of this run: it either measures it or says again why not.
        results["skipped"] = [s for s in results["skipped"] if _key(s) != _key(label)]
        if time.perf_counter() - start > args.budget_s:
            results["skipped"].append(dict(label, reason="budget"))
            continue
        cmd = [sys.executable, __file__, "--probe", framework, name, precision, *(["--smoke"] if args.smoke else [])]
        began = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s,
                                  env=dict(os.environ, **env), check=False)
        except subprocess.TimeoutExpired:
            results["skipped"].append(dict(label, reason=f"timeout {args.timeout_s:.0f} s"))
            print(f"{framework:14s} {name:20s} {precision:8s} timed out", flush=True)
            continue
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            results["skipped"].append(dict(label, reason="failed: " + proc.stderr.strip()[-1500:]))
            print(f"{framework:14s} {name:20s} {precision:8s} FAILED\n{proc.stderr[-1500:]}", flush=True)
            continue
        row = dict(label, seconds=time.perf_counter() - began, measured=_now(), commit=commit,
                   **json.loads(lines[-1][len("RESULT "):]))
        results["runs"] = [r for r in results["runs"] if _key(r) != _key(row)] + [row]
        print(f"{framework:14s} {name:20s} {precision:8s} {' '.join(env.values()):30s} train "
              f"{row['train']['images_per_s']:9.0f} img/s peak {row['train'].get('peak_mib') or 0:7.0f} MiB | infer "
              f"{row['infer']['images_per_s']:9.0f} img/s ({row['seconds']:.0f} s)", flush=True)
        write_json(args.json, results)  # after every process: a run cut short keeps what it measured
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
