"""Time a train step and a forward pass: torch eager vs jax_impl under jax.jit.

    python benchmarks/train_step.py [--repeats N] [--json PATH] [--only lenet_b256,...] [--no-memory]
                                    [--device cpu|cuda] [--tf32] [--compile]

Cases (float32, random data): ``train_step_models.CASES``, each a model a user
writes with its loss and optimizer: LeNet, ResNet-18 at two shapes, the PyTorch
MNIST example's network, two GPT-style language models, ViT-Ti/4 on 32x32, the
word-language-model example's 2-layer LSTM and the DCGAN example's two-network
step (``train_step_models`` describes each).

For each case:

- ``train``: one full step. torch: ``zero_grad``, forward, loss, backward,
  the case's ``clip_grad_norm_``, ``optimizer.step`` (eager, the way a torch
  recipe runs; with ``--compile`` also ``torch.compile(model)``, the optimizer
  eager). JAX: ``jax_impl.train``'s step, what a user's loop runs: the model
  split once into parameters and buffers, one ``jax.jit`` of forward, loss,
  ``jax.grad``, the clip and the ``jax_impl.optim`` optimizer's exact step,
  the batch an argument, the state donated (updated in place); DCGAN: the
  example's own jitted step (``examples.loops.dcgan.jax_programs``);
- ``infer``: forward in eval mode (torch under ``torch.no_grad``, JAX one
  jitted forward).

Both frameworks start from the same weights (``parity.convert``) and are
warmed up (compilation excluded from the timings). The ``--repeats`` calls
are taken in 10 alternating rounds of blocks, JAX then torch, so that the
shared host's speed drifting during the run hits both alike; calls of the two
frameworks never alternate one by one (interleaving torch's OpenMP pool with
XLA's thread pool slows both). Reported: median and min over the
``--repeats`` calls, and the ratio torch time / JAX time (above 1: JAX is
faster), paired by round: the median over rounds of torch's block median over
JAX's block median in the same round (``_common.paired_ratio``; the ratio of
the overall medians is kept in the JSON as ``ratio_of_medians``).

FLOPs (on the CPU): ``torch.utils.flop_counter.FlopCounterMode`` over one
torch call of each mode (matrix products, convolutions, attention; the same
work on both sides), so the achieved GFLOP/s of each framework can be set
beside the machine's peak, measured as the best float32 2048 x 2048 GEMM of
torch and of XLA (``peak_gflops``).

Peak memory (unless ``--no-memory``): each framework runs the train step in
a fresh subprocess that imports only that framework, for a few batch sizes;
reported are the growth of the process's peak RSS from just before the first
step to after three steps (for JAX this includes compiling the step; for
torch its first-call allocations), the bytes torch's autograd saves for the
backward pass in one step (``saved_tensors_hooks``: the activations a batch
size drives), and for JAX XLA's own account of the compiled step
(``memory_analysis().temp_size_in_bytes``: scratch space, beyond the
arguments).

On a GPU (``--device cuda``; install ``jax[cuda12]`` and a CUDA build of
torch): torch's model and batch live on the GPU and each timed call ends
with ``torch.cuda.synchronize()``; JAX uses its default (GPU) device. TF32
is off unless ``--tf32`` (torch: ``torch.backends.cuda.matmul.allow_tf32``
and ``torch.backends.cudnn.allow_tf32``, both set explicitly since cuDNN's
default is on; JAX: ``jax_default_matmul_precision`` and jax_impl's
switches of the same names, ``jax_impl.backends.cuda`` and
``jax_impl.backends.cudnn``). Parity runs need it off; report both. Memory on a GPU is each
framework's own peak (``torch.cuda.max_memory_allocated``, the JAX device's
``memory_stats()['peak_bytes_in_use']``) instead of RSS.

This is a benchmark, not a test: nothing under tests/ runs it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the repository: examples/ (the MNIST net)

from _common import machine_info, paired_ratio, ratio, time_blocks, write_json  # noqa: E402
from train_step_models import CASES, data, jax_setup, jax_model, jax_train_step, torch_setup  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results" / "train_step.json"
ROUNDS = 10  # alternating blocks of JAX and torch calls (time_blocks): the host's speed drifts within a run
DEVICE = {"name": "cpu"}  # set by --device


def _sync() -> None:
    if DEVICE["name"] == "cuda":
        import torch

        torch.cuda.synchronize()


def _set_tf32(on: bool, frameworks: tuple[str, ...] = ("jax", "torch")) -> None:
    if "jax" in frameworks:
        import jax

        from jax_impl.backends import cuda, cudnn

        jax.config.update("jax_default_matmul_precision", None if on else "highest")  # None: XLA's TF32 default
        cuda.matmul.allow_tf32 = cudnn.allow_tf32 = on
    if "torch" in frameworks:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def torch_calls(case: dict[str, Any], x, y, *, compiled: bool = False):
    """``train`` and ``infer`` closures for torch, and the model(s) (to copy the weights to JAX)."""
    import torch

    return torch_setup(case, x, y, torch.device(DEVICE["name"]), _sync, compiled=compiled)


def count_flops(fns: dict[str, Any]) -> dict[str, int]:
    """The floating-point operations of one call of each closure, as ``torch.utils.flop_counter`` counts them.

    Matrix products, convolutions and attention (forward and backward), the work
    both frameworks do alike; element-wise operations are not counted.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    flops = {}
    # The counter does not see inside the fused kernel of TransformerEncoderLayer's inference fast path:
    # counted with the fast path off, the same products run as separate, counted operations.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        for mode, call in fns.items():
            counter = FlopCounterMode(display=False)
            with counter:
                call()
            flops[mode] = int(counter.get_total_flops())
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return flops


def peak_gflops(repeats: int = 10) -> dict[str, float]:
    """This machine's float32 matrix-product rate in GFLOP/s: a 2048 x 2048 GEMM, best of ``repeats``, each
    framework (torch's MKL, XLA's), on the device the cases run on."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    ta = torch.from_numpy(a).to(DEVICE["name"])
    ja = jnp.asarray(a)
    matmul = jax.jit(jnp.matmul)
    calls = {"torch": lambda: (torch.mm(ta, ta), _sync()),
             "jax": lambda: jax.block_until_ready(matmul(ja, ja))}
    rates = {}
    for name, call in calls.items():
        call()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
        rates[name] = 2 * n**3 / best / 1e9
    return rates


def run_case(name: str, *, repeats: int, compiled: bool = False) -> dict[str, Any]:
    """Times one case: torch eager and jax_impl (and ``torch.compile`` with ``compiled``), paired by round."""
    case = CASES[name]
    x, y = data(case)
    torch_fns, torch_model = torch_calls(case, x, y)
    jax_fns = jax_setup(case, x, y, torch_model)
    result: dict[str, Any] = {"case": dict(case, memory_batches=list(case["memory_batches"]))}
    groups = {"jax": jax_fns, "torch": torch_fns}
    if compiled:
        groups["torch_compile"] = torch_calls(case, x, y, compiled=True)[0]
    if DEVICE["name"] == "cpu":
        result["flops"] = count_flops(torch_fns)
    times = time_blocks(groups, warmup=2, repeats=repeats, rounds=min(ROUNDS, repeats))
    for mode in ("train", "infer"):
        result[mode] = {g: times[g][mode] for g in groups}
        result[mode]["ratio"] = paired_ratio(times["torch"][mode], times["jax"][mode])
        result[mode]["ratio_of_medians"] = ratio(times["torch"][mode], times["jax"][mode])
        if compiled:
            result[mode]["compile_ratio"] = paired_ratio(times["torch_compile"][mode], times["jax"][mode])
    return result


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _torch_saved_bytes(fns) -> int:
    """Bytes of the distinct tensors autograd saves for the backward pass during one train step.

    The memory a batch size drives in torch (activations kept until backward), counted
    through ``torch.autograd.graph.saved_tensors_hooks``; parameters are counted too when
    an op saves them (a Linear saves its weight), each storage once.
    """
    import torch

    storages: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fns["train"]()
    return sum(storages.values())


def memory_probe(framework: str, name: str, batch: int) -> dict[str, Any]:
    """Run in a subprocess: peak-RSS growth over three train steps of one framework."""
    case = CASES[name]
    x, y = data(case, batch)
    out: dict[str, Any] = {}
    if framework == "torch":
        fns, _ = torch_calls(case, x, y)
        train = fns["train"]
    else:
        import jax
        import jax.numpy as jnp

        step, state = jax_train_step(case, jax_model(case))
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        analysis = step.lower(state, jx, jy).compile().memory_analysis()
        if analysis is not None:
            out["xla_temp_bytes"] = int(analysis.temp_size_in_bytes)
        box = {"state": state}

        def train() -> None:
            box["state"], loss = step(box["state"], jx, jy)
            jax.block_until_ready(loss)

    before = _rss_bytes()
    for _ in range(3):
        train()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["peak_rss_growth_bytes"] = max(0, peak - before)
    if framework == "torch":
        out["torch_saved_bytes"] = _torch_saved_bytes(fns)
    if DEVICE["name"] == "cuda":
        if framework == "torch":
            import torch

            out["device_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        else:
            stats = jax.devices()[0].memory_stats() or {}
            out["device_peak_bytes"] = int(stats.get("peak_bytes_in_use", -1))
    return out


def run_memory(name: str) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for batch in CASES[name]["memory_batches"]:
        for framework in ("torch", "jax"):
            proc = subprocess.run(
                [sys.executable, __file__, "--memory-probe", framework, name, str(batch), "--device", DEVICE["name"],
                 *(["--tf32"] if DEVICE.get("tf32") else [])],
                capture_output=True, text=True, check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"memory probe {framework} {name} {batch} failed:\n{proc.stderr[-3000:]}")
            rows.setdefault(str(batch), {})[framework] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases: " + ", ".join(CASES))
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where torch runs (JAX: its default device)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 on a GPU (speed runs; parity runs leave it off)")
    parser.add_argument("--compile", action="store_true",
                        help="also time torch.compile(model) (inductor; its compilation excluded, as JAX's)")
    parser.add_argument("--memory-probe", nargs=3, metavar=("FRAMEWORK", "CASE", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    DEVICE.update(name=args.device, tf32=args.tf32)
    if args.memory_probe:
        framework, name, batch = args.memory_probe
        if framework == "jax":
            import jax_impl  # noqa: F401  (XLA:CPU flags before jax's backend starts)
        _set_tf32(args.tf32, (framework,))
        print(json.dumps(memory_probe(framework, name, int(batch))))
        return 0
    import jax_impl  # noqa: F401

    _set_tf32(args.tf32)

    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    results: dict[str, Any] = {"machine": machine_info(), "repeats": args.repeats, "device": args.device,
                               "tf32": args.tf32, "cases": {}}
    if args.device == "cpu":
        results["peak_gflops"] = peak_gflops()
        print("peak float32 GEMM GFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in results["peak_gflops"].items()))
    for name in names:
        res = run_case(name, repeats=args.repeats, compiled=args.compile)
        if not args.no_memory:
            res["memory"] = run_memory(name)
        results["cases"][name] = res
        print(f"{name:18s} train: torch {res['train']['torch']['median_ms']:8.1f} ms  jax "
              f"{res['train']['jax']['median_ms']:8.1f} ms  ratio {res['train']['ratio']:.2f} | infer: torch "
              f"{res['infer']['torch']['median_ms']:7.1f} ms  jax {res['infer']['jax']['median_ms']:7.1f} ms  "
              f"ratio {res['infer']['ratio']:.2f}"
              + (f" | compile ratio train {res['train']['compile_ratio']:.2f} infer {res['infer']['compile_ratio']:.2f}"
                 if args.compile else ""), flush=True)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
