"""Time a train step and a forward pass: torch eager vs jax_impl under jax.jit.

    python benchmarks/train_step.py [--repeats N] [--json PATH] [--only lenet_b256,...] [--no-memory]
                                    [--device cpu|cuda] [--tf32]

Cases (float32, random data, CrossEntropyLoss, SGD lr=0.01 momentum=0.9):

- ``lenet_b256``: LeNet (3x32x32, 10 classes), batch 256;
- ``resnet18_b32_64``: ResNet-18 (10 classes), batch 32 of 3x64x64;
- ``resnet18_b4_224``: ResNet-18 (1000 classes), batch 4 of 3x224x224;
- ``mnist_b64``: the PyTorch MNIST example's network (``examples/mnist_net.py``:
  two 3x3 convs of 32 and 64 channels on 1x28x28, max pool, dropout 0.25 and
  0.5, fc 9216->128->10, log-softmax; NLLLoss), batch 64, as the example
  trains it; dropout draws torch's masks on both sides.

For each case:

- ``train``: one full step. torch: ``zero_grad``, forward, loss, backward,
  ``SGD.step`` (eager, the way a torch recipe runs). JAX: ``jax_impl.train``'s
  step, what a user's loop runs: the model split once into parameters and
  buffers, one ``jax.jit`` of forward, loss, ``jax.grad`` and
  ``jax_impl.optim.sgd``'s exact step, the batch an argument, the state
  donated (updated in place);
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

DEFAULT_JSON = Path(__file__).parent / "results" / "train_step.json"

CASES: dict[str, dict[str, Any]] = {
    "lenet_b256": dict(model="lenet", batch=256, image=32, classes=10, memory_batches=(64, 256, 1024)),
    "resnet18_b32_64": dict(model="resnet18", batch=32, image=64, classes=10, memory_batches=(8, 32, 64)),
    "resnet18_b4_224": dict(model="resnet18", batch=4, image=224, classes=1000, memory_batches=(2, 4, 8)),
    "mnist_b64": dict(model="mnist", batch=64, image=28, classes=10, channels=1, loss="NLLLoss",
                      memory_batches=(16, 64, 256)),
}
LR, MOMENTUM = 0.01, 0.9
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


def _torch_model(case: dict[str, Any]):
    import torch

    from torch_ref import models

    torch.manual_seed(0)
    if case["model"] == "lenet":
        return models.LeNet(num_classes=case["classes"], in_channels=3, image_size=case["image"])
    if case["model"] == "mnist":
        from examples.mnist_net import Net

        return Net(image_size=case["image"])
    return models.resnet18(num_classes=case["classes"])


def _jax_model(case: dict[str, Any]):
    from flax import nnx

    from jax_impl import models

    rngs = nnx.Rngs(0)
    if case["model"] == "lenet":
        return models.LeNet(num_classes=case["classes"], in_channels=3, image_size=case["image"], rngs=rngs)
    if case["model"] == "mnist":
        from examples.mnist_net import JaxNet

        return JaxNet(image_size=case["image"])
    return models.resnet18(num_classes=case["classes"], rngs=rngs)


def _data(case: dict[str, Any], batch: int | None = None):
    import numpy as np

    rng = np.random.default_rng(0)
    n = batch or case["batch"]
    x = rng.standard_normal((n, case.get("channels", 3), case["image"], case["image"]), dtype=np.float32)
    y = rng.integers(0, case["classes"], n).astype(np.int64)
    return x, y


def torch_calls(case: dict[str, Any], x, y):
    """``train`` and ``infer`` closures for torch, and the model (to copy its weights to JAX)."""
    import torch

    device = torch.device(DEVICE["name"])
    model = _torch_model(case).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = getattr(torch.nn, case.get("loss", "CrossEntropyLoss"))()
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    def train() -> None:
        model.train()
        opt.zero_grad()
        loss_fn(model(tx), ty).backward()
        opt.step()
        _sync()

    def infer() -> None:
        model.eval()
        with torch.no_grad():
            model(tx)
        _sync()

    return {"train": train, "infer": infer}, model


def jax_train_step(model, *, donate: bool = True, loss: str = "CrossEntropyLoss"):
    """``(state, x, y) -> (state, loss)`` and the initial state: ``jax_impl.train``'s step, what a user's loop
    runs (the model split once, the batch an argument, the state donated, ``tx.step``)."""
    from jax_impl import nn, optim
    from jax_impl.train import init_train_state, train_step

    tx = optim.sgd(lr=LR, momentum=MOMENTUM)
    graphdef, state = init_train_state(model, tx)
    return train_step(graphdef, getattr(nn, loss)(), tx, donate=donate), state


def jax_calls(case: dict[str, Any], x, y, torch_model):
    """``train`` and ``infer`` closures for jax_impl, starting from ``torch_model``'s weights."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from parity.convert import load_torch_state_dict

    model = _jax_model(case)
    load_torch_state_dict(model, {k: v.cpu() for k, v in torch_model.state_dict().items()})
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    model.eval()
    graphdef, variables = nnx.split(model)
    variables = jax.tree.map(jnp.copy, variables)  # the train step donates (deletes) the model's own arrays
    forward = jax.jit(lambda v, a: nnx.merge(graphdef, v)(a))
    model.train()
    step, state = jax_train_step(model, loss=case.get("loss", "CrossEntropyLoss"))
    box = {"state": state}

    def train() -> None:
        box["state"], loss = step(box["state"], jx, jy)
        jax.block_until_ready(loss)

    def infer() -> None:
        jax.block_until_ready(forward(variables, jx))

    return {"train": train, "infer": infer}


def run_case(name: str, *, repeats: int) -> dict[str, Any]:
    case = CASES[name]
    x, y = _data(case)
    torch_fns, torch_model = torch_calls(case, x, y)
    jax_fns = jax_calls(case, x, y, torch_model)
    result: dict[str, Any] = {"case": dict(case, memory_batches=list(case["memory_batches"]))}
    times = time_blocks({"jax": {k: jax_fns[k] for k in ("train", "infer")},
                         "torch": {k: torch_fns[k] for k in ("train", "infer")}},
                        warmup=2, repeats=repeats, rounds=min(ROUNDS, repeats))
    jax_times, torch_times = times["jax"], times["torch"]
    for mode in ("train", "infer"):
        result[mode] = {"torch": torch_times[mode], "jax": jax_times[mode],
                        "ratio": paired_ratio(torch_times[mode], jax_times[mode]),
                        "ratio_of_medians": ratio(torch_times[mode], jax_times[mode])}
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
    x, y = _data(case, batch)
    out: dict[str, Any] = {}
    if framework == "torch":
        fns, _ = torch_calls(case, x, y)
        train = fns["train"]
    else:
        import jax
        import jax.numpy as jnp

        step, state = jax_train_step(_jax_model(case), loss=case.get("loss", "CrossEntropyLoss"))
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
    for name in names:
        res = run_case(name, repeats=args.repeats)
        if not args.no_memory:
            res["memory"] = run_memory(name)
        results["cases"][name] = res
        print(f"{name:18s} train: torch {res['train']['torch']['median_ms']:8.1f} ms  jax "
              f"{res['train']['jax']['median_ms']:8.1f} ms  ratio {res['train']['ratio']:.2f} | infer: torch "
              f"{res['infer']['torch']['median_ms']:7.1f} ms  jax {res['infer']['jax']['median_ms']:7.1f} ms  "
              f"ratio {res['infer']['ratio']:.2f}", flush=True)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
