"""``parity bench``: run the benchmark scripts of ``benchmarks/`` and write ``docs/benchmarks.md``.

Every benchmark times torch and JAX on the same work in one run (warm-up,
several repeats, medians) and writes its own JSON under
``benchmarks/results/``; this module runs them, each in its own process
(XLA and torch thread pools, flags and memory start fresh), and renders one
Markdown report of ratios from those JSON files, headed by the machine they
were measured on. A ratio is torch's time over ours: above 1 means the JAX
side is faster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["BENCHMARKS", "HUGETLB_TUNABLE", "Benchmark", "benchmark_env", "benchmarks_dir", "cpu_maker",
           "keep_cpu_run", "render_markdown", "run_benchmarks"]

ROOT = Path(__file__).resolve().parent.parent

# glibc >= 2.35: malloc's mmap'd chunks are madvise(MADV_HUGEPAGE)d, so with transparent huge pages
# in "madvise" mode large buffers (XLA's per-call scratch, the parameters) sit on 2 MiB pages.
# Measured (ResNet-18 inference, 224x224, batch 4, 6 processes each): without it JAX's time per
# process was bimodal, up to ~30% apart by where its buffers landed; with it within ~7%. torch's
# times did not move. Older glibc ignores the tunable.
HUGETLB_TUNABLE = "glibc.malloc.hugetlb=1"


def benchmark_env(hugetlb: bool = True) -> dict[str, str]:
    """The environment of the benchmark processes: this one's, plus ``HUGETLB_TUNABLE`` when ``hugetlb``
    and ``GLIBC_TUNABLES`` is not already set (a user's own setting wins)."""
    env = dict(os.environ)
    if hugetlb and not env.get("GLIBC_TUNABLES"):
        env["GLIBC_TUNABLES"] = HUGETLB_TUNABLE
    return env


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One script of ``benchmarks/``, its JSON name, the arguments for a quick run and those a full run adds
    (the report's every column)."""

    name: str
    script: str
    quick_args: tuple[str, ...]
    about: str
    full_args: tuple[str, ...] = ()


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("train_step", "train_step.py", ("--repeats", "3", "--only", "lenet_b256,gpt_d128_t64", "--no-memory"),
              "train step and inference: LeNet, ResNet-18, the MNIST example, GPT LMs, ViT-Ti, an LSTM LM, DCGAN; "
              "torch.compile beside torch eager (full runs), peak memory, FLOP rates", ("--compile",)),
    Benchmark("conv_speed", "conv_speed.py", ("--repeats", "3", "--only", "lenet_c1,r18_64_3x3_64", "--no-step"),
              "conv2d forward and forward+backward for LeNet and ResNet-18 layer shapes"),
    Benchmark("optim_update", "optim_update.py", ("--repeats", "5", "--only", "sgd,adam"),
              "one optimizer update of an 11.7M-parameter tree vs optax and torch"),
    Benchmark("dataloader_throughput", "dataloader_throughput.py", ("--repeats", "1"),
              "DataLoader throughput, in-memory and per-sample data sets"),
    Benchmark("parity_run", "parity_run.py", ("--repeats", "1"),
              "wall time of `parity run configs/lenet_digits.yaml`, each side alone and both"),
    Benchmark("random_draws", "random_draws.py", ("--repeats", "4", "--only", "randn_128x20,rand_1m"),
              "torch's random draws on the host (normal, uniform, dropout masks, exponential, multinomial, "
              "randperm) against torch's generator"),
    Benchmark("training_loops", "training_loops.py", ("--rounds", "2", "--scale", "0.25", "--only", "vae,reinforce"),
              "the five example loops (VAE, DCGAN, word LM, REINFORCE, LBFGS time sequence), a run and a step"),
)}


def benchmarks_dir() -> Path:
    """The repository's ``benchmarks/`` folder (``parity bench`` runs from a source checkout)."""
    folder = ROOT / "benchmarks"
    if not (folder / "_common.py").is_file():
        raise FileNotFoundError(
            f"{folder} not found: `parity bench` runs the scripts of a source checkout's benchmarks/ folder "
            "(git clone the repository and pip install -e it)")
    return folder


def run_benchmarks(names: Sequence[str], *, quick: bool = False, results_dir: Path | None = None,
                   extra: Sequence[str] = (), hugetlb: bool = True) -> dict[str, Path]:
    """Run each named benchmark in its own process; returns the JSON file each wrote.

    ``hugetlb``: run them with glibc's malloc on huge pages (:func:`benchmark_env`), both frameworks
    alike, since they share each process.

    Raises:
      KeyError: an unknown benchmark name.
      RuntimeError: a benchmark script failed (its stderr is in the message).
    """
    folder = benchmarks_dir()
    results_dir = Path(results_dir) if results_dir is not None else folder / "results"
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise KeyError(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    written = {}
    for name in names:
        bench = BENCHMARKS[name]
        out = results_dir / f"{name}.json"
        cmd = [sys.executable, str(folder / bench.script), "--json", str(out),
               *(bench.quick_args if quick else bench.full_args), *extra]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, check=False, env=benchmark_env(hugetlb))
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark {name} failed with exit code {proc.returncode}")
        print(f"   {name} took {time.perf_counter() - start:.0f} s", flush=True)
        written[name] = out
        if name == "train_step" and not quick:
            kept = keep_cpu_run(out)
            if kept is not None:
                print(f"   kept as {kept.name} (this CPU maker's row of the by-CPU table)", flush=True)
    return written


def cpu_maker(cpu: str) -> str:
    """``"intel"``, ``"amd"`` or another lower-case word naming the maker of a CPU model string."""
    lower = cpu.lower()
    for maker in ("intel", "amd"):
        if maker in lower:
            return maker
    word = "".join(c if c.isalnum() else " " for c in lower).split()
    return word[0] if word else "unknown"


def keep_cpu_run(path: Path) -> Path | None:
    """Copy a full CPU ``train_step`` result to ``train_step_cpu_<maker>.json`` beside it; returns the copy.

    Which framework is faster depends on the CPU's maker (torch's MKL GEMMs run at about half XLA's
    rate on an AMD EPYC and above it on an Intel Xeon), so the report keeps the latest run of each maker
    in its by-CPU table. ``None`` (nothing kept) for a GPU run.
    """
    text = Path(path).read_text()
    data = json.loads(text)
    if data.get("device", "cpu") != "cpu":
        return None
    kept = Path(path).with_name(f"train_step_cpu_{cpu_maker(_machine(data).get('cpu', ''))}.json")
    kept.write_text(text)
    return kept


# ----------------------------------------------------------------------------- report

def _load(results_dir: Path, name: str) -> dict[str, Any] | None:
    path = results_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _ms(t: dict[str, Any]) -> str:
    return f"{t['median_ms']:.1f}"


def _machine(data: dict[str, Any]) -> dict[str, Any]:
    machine = dict(data.get("machine") or {})
    for key in ("python", "torch", "platform"):  # older scripts keep these at the top level
        if key in data and key not in machine:
            machine[key] = data[key]
    if "cpus" in data:
        machine.setdefault("logical_cores", data["cpus"])
    return machine


_TRAIN_STEP_CASES = (
    "LeNet and ResNet-18: CrossEntropyLoss, SGD(lr=0.01, momentum=0.9). `mnist_b64`: the MNIST example's "
    "network, NLLLoss, its dropouts on (torch's masks on both sides). `gpt_*`: a GPT-style character LM "
    "(`examples/char_gpt.py`, pre-norm causal blocks, dropout 0.1; d 128 x 4 layers x 64 tokens, batch 16, "
    "and d 384 x 6 layers x 256 tokens, batch 8), AdamW, `clip_grad_norm_(1.0)`. `vit_tiny_b32_32`: ViT-Ti/4 "
    "(dim 192, 12 layers) on 32x32, batch 32, AdamW, clip 1.0. `lstm_lm_b32_35`: the word-language-model "
    "example's 2-layer LSTM (256, dropout 0.2, 10,000 words), 35 steps x batch 32, clip 0.25, SGD(lr=20). "
    "`dcgan_b32_32`: the DCGAN example's networks (nz 100, ngf = ndf = 64) at 32x32, batch 32, one "
    "discriminator and one generator Adam step; its inference is the generator's forward.")


def _section_train_step(data: dict[str, Any]) -> list[str]:
    cases = data["cases"]
    compiled = any("torch_compile" in res["train"] for res in cases.values())
    lines = ["## Train step and inference", "",
             "Float32, random data, each model with its own loss and optimizer (below). torch: eager"
             + (" and `torch.compile(model)` (inductor, the optimizer eager)" if compiled else "")
             + "; JAX: `jax_impl.train`'s step (one `jax.jit` of the split model, the batch an argument, the state "
             "donated). Targets: train ratio >= 1.2 and inference >= 1.3 against torch eager on 2 CPU cores, the "
             "LSTM step >= 1.0. Times are medians over "
             "all calls; a ratio is paired by round (the calls run in alternating rounds of a JAX block and a "
             "torch block): the median over rounds of torch's block median / JAX's, which cancels the shared "
             "host's drift in speed between rounds.", "", _TRAIN_STEP_CASES, ""]
    if compiled:
        lines += ["| case | train torch ms | train compile ms | train JAX ms | train ratio | compile ratio | "
                  "infer torch ms | infer compile ms | infer JAX ms | infer ratio | compile ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
    else:
        lines += ["| case | train torch ms | train JAX ms | train ratio | infer torch ms | infer JAX ms | infer ratio |",
                  "|---|---|---|---|---|---|---|"]
    for name, res in cases.items():
        cells = [name]
        for mode in ("train", "infer"):
            r = res[mode]
            if compiled and "torch_compile" in r:
                cells += [_ms(r["torch"]), _ms(r["torch_compile"]), _ms(r["jax"]), f"{r['ratio']:.2f}",
                          f"{r['compile_ratio']:.2f}"]
            elif compiled:
                cells += [_ms(r["torch"]), "n/a", _ms(r["jax"]), f"{r['ratio']:.2f}", "n/a"]
            else:
                cells += [_ms(r["torch"]), _ms(r["jax"]), f"{r['ratio']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    peak = data.get("peak_gflops")
    flops = {name: res["flops"] for name, res in cases.items() if "flops" in res}
    if flops and peak:
        top = max(peak.values())
        lines += ["", f"FLOP rate: the matrix products, convolutions and attention of one call "
                  "(`torch.utils.flop_counter`, the same work on both sides) over its median time, against this "
                  f"machine's float32 GEMM peak (best 2048 x 2048 product: torch {peak['torch']:.0f}, XLA "
                  f"{peak['jax']:.0f} GFLOP/s; % of the higher).", "",
                  "| case | train GFLOP | train torch GFLOP/s | train JAX GFLOP/s | torch % peak | JAX % peak | "
                  "infer GFLOP | infer torch GFLOP/s | infer JAX GFLOP/s |", "|---|---|---|---|---|---|---|---|---|"]
        for name, counted in flops.items():
            res = cases[name]

            def rate(mode: str, side: str) -> float:
                return counted[mode] / res[mode][side]["median_ms"] / 1e6

            lines.append(f"| {name} | {counted['train'] / 1e9:.2f} | {rate('train', 'torch'):.0f} | "
                         f"{rate('train', 'jax'):.0f} | {100 * rate('train', 'torch') / top:.0f} | "
                         f"{100 * rate('train', 'jax') / top:.0f} | {counted['infer'] / 1e9:.2f} | "
                         f"{rate('infer', 'torch'):.0f} | {rate('infer', 'jax'):.0f} |")
    memory = {name: res["memory"] for name, res in data["cases"].items() if "memory" in res}
    if memory:
        when = f" (measured {data['memory_measured'][:16]})" if data.get("memory_measured") else ""
        lines += ["", f"Memory of a train step{when}, in MiB, each framework in a fresh process: the growth of the peak "
                  "RSS over the first three steps (JAX's includes compiling the step, torch's its first-call "
                  "allocations), the bytes torch's autograd saves for backward in one step (the activations "
                  "the batch size drives), and XLA's scratch space for the compiled step (its counterpart).", "",
                  "| case | batch | torch RSS growth | JAX RSS growth | torch saved for backward | XLA temp |",
                  "|---|---|---|---|---|---|"]

        def mib(row: dict[str, Any], key: str) -> str:
            return "n/a" if row.get(key) is None else f"{row[key] / 2**20:.0f}"

        for name, rows in memory.items():
            for batch, row in rows.items():
                t, j = row["torch"], row["jax"]
                lines.append(f"| {name} | {batch} | {mib(t, 'peak_rss_growth_bytes')} | "
                             f"{mib(j, 'peak_rss_growth_bytes')} | {mib(t, 'torch_saved_bytes')} | "
                             f"{mib(j, 'xla_temp_bytes')} |")
    return lines


def _section_by_cpu(results_dir: Path) -> list[str]:
    """The train and inference ratios of the latest full ``train_step`` run on each CPU maker's machine."""
    runs = [json.loads(p.read_text()) for p in sorted(results_dir.glob("train_step_cpu_*.json"))]
    if not runs:
        return []
    machines = [_machine(run) for run in runs]
    lines = ["## Train step and inference by CPU", "",
             "The same benchmark's ratios (torch eager time / JAX time, paired by round; above 1, JAX is faster) "
             "on each CPU maker's 2-core machine it last ran on. torch's GEMMs run MKL, whose kernels depend on "
             "the maker; its convolutions run oneDNN on both (as do jax_impl's); XLA's GEMMs are its own.", ""]
    for machine, run in zip(machines, runs):
        peak = run.get("peak_gflops") or {}
        gemm = f", float32 GEMM peak torch {peak['torch']:.0f} / XLA {peak['jax']:.0f} GFLOP/s" if peak else ""
        lines.append(f"- {machine.get('cpu', '?')}: torch {machine.get('torch', '?')}, jax {machine.get('jax', '?')}"
                     f"{gemm}, measured {str(machine.get('date', '?'))[:10]}.")
    names = [m.get("cpu", "?") for m in machines]
    lines += ["", "| case | " + " | ".join(f"{n} train | {n} infer" for n in names) + " |",
              "|---|" + "---|---|" * len(runs)]
    cases = list(dict.fromkeys(case for run in runs for case in run["cases"]))
    for case in cases:
        cells = [case]
        for run in runs:
            res = run["cases"].get(case)
            cells += [f"{res[mode]['ratio']:.2f}" if res else "n/a" for mode in ("train", "infer")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _section_conv(data: dict[str, Any]) -> list[str]:
    lines = ["## conv2d", "",
             "Forward (`fwd`) and forward plus both gradients (`fb`) of one conv. `plain`: XLA's own "
             "convolution; `ours`: `jax_impl.nn.functional.conv2d` (`jax_impl/nn/_fast_conv.py`).", "",
             "| shape | fwd torch ms | fwd plain ms | fwd ours ms | fwd ratio | fb torch ms | fb plain ms | "
             "fb ours ms | fb ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for name, res in data["convs"].items():
        cells = []
        for mode in ("fwd", "fb"):
            r = res[mode]
            cells += [_ms(r["torch"]), _ms(r["plain"]), _ms(r["fast"]), f"{r['torch_over_fast']:.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _section_optim(data: dict[str, Any]) -> list[str]:
    lines = ["## Optimizer update, 11.7M parameters", "",
             "One jitted, donated update of ResNet-18's parameter tree. Target: ours <= 1.1x the "
             "nearest optax built-in. `table`/`mkl` are the torch-sqrt parity modes, `ieee` plain sqrt.", ""]
    return lines + _optim_table(data, ms_digits=1, mkl=True, torch_ratio_digits=1)


def _optim_table(data: dict[str, Any], *, ms_digits: int, mkl: bool, torch_ratio_digits: int) -> list[str]:
    """``optim_update.py``'s results as a table: optax, ours (ieee; and mkl / optax if ``mkl``), torch."""
    columns = ["optimizer", "optax built-in", "optax ms", "ours (ieee) ms", "ours/optax (ieee)",
               *(["ours (mkl) / optax"] if mkl else []), "torch ms", "torch / ours (ieee)"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, res in data["results"].items():
        t, r = res["times"], res["ratios"]
        ms = {v: f"{t[v]['median_ms']:.{ms_digits}f}" for v in ("optax", "step[ieee]", "torch")}
        cells = [name, f"`{res.get('optax', '')}`", ms["optax"], ms["step[ieee]"], f"{r['step_ieee/optax']:.2f}",
                 *([f"{r['step_mkl/optax']:.2f}"] if mkl else []), ms["torch"],
                 f"{t['torch']['median_ms'] / t['step[ieee]']['median_ms']:.{torch_ratio_digits}f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _section_loader(data: dict[str, Any]) -> list[str]:
    lines = ["## DataLoader throughput", "",
             f"{data.get('dataset', '')}, batch {data.get('batch_size')}, shuffled; batches per second, "
             "`iter()` included in each epoch.", "",
             "| data set | workers | persistent | ours batches/s | torch batches/s | ratio |", "|---|---|---|---|---|---|"]
    for row in data["results"]:
        lines.append(f"| {row['case']} | {row['num_workers']} | {row['persistent_workers']} | "
                     f"{row['ours_batches_per_s']:.0f} | {row['torch_batches_per_s']:.0f} | "
                     f"{row['ratio_ours_over_torch']:.2f} |")
    return lines


def _section_parity_run(data: dict[str, Any]) -> list[str]:
    lines = ["## `parity run` wall time", "",
             f"`parity run {data['config']}` ({data['steps']} steps) in a fresh process, median of "
             f"{data['repeats']}; the loop columns are the training-loop seconds the runner reports (JAX's "
             "include compiling the step).", "",
             "| way | wall s | torch loop s | JAX loop s |", "|---|---|---|---|"]
    for way, res in data["ways"].items():
        run = min(res["runs"], key=lambda r: abs(r["wall_s"] - res["median_wall_s"]))
        loops = ["-" if run[k] is None else f"{run[k]:.2f}" for k in ("torch_loop_s", "jax_loop_s")]
        lines.append(f"| {way} | {res['median_wall_s']:.1f} | {loops[0]} | {loops[1]} |")
    lines += ["", f"Ratio torch-only wall / JAX-only wall: {data['ratio']:.2f}."]
    if "cold_wall_s" in data:
        imports = ", ".join(f"`import {m}` {s:.2f} s" for m, s in data.get("import_s", {}).items())
        lines += ["", f"Time to first result (the full comparison, a fresh process): {data['cold_wall_s']:.1f} s with "
                  f"an empty compilation cache, {data['warm_wall_s']:.1f} s with the cache the first run filled "
                  f"(targets 10 s and 6 s). A fresh interpreter's imports: {imports}."]
    return lines


def _section_random(data: dict[str, Any]) -> list[str]:
    lines = ["## Random draws", "",
             "One draw from torch's CPU stream, the same numbers on both sides: `jax_impl.random.Generator` "
             "against a `torch.Generator`, each case warmed up as a loop's steps are (jax_impl's float32 normals "
             "are compiled once a size repeats), paired by round.", "",
             "| case | draw | ours ms | torch ms | ratio |", "|---|---|---|---|---|"]
    for name, row in data["cases"].items():
        lines.append(f"| {name} | {row['what']} | {row['jax_impl']['median_ms']:.3f} | "
                     f"{row['torch']['median_ms']:.3f} | {row['ratio']:.2f} |")
    return lines


def _section_loops(data: dict[str, Any]) -> list[str]:
    lines = ["## Training loops", "",
             "The example loops of `examples/loops` (the official PyTorch examples' loops, the same numbers on "
             "both sides), each in its example's dtype. `run`: a fresh process's whole run of `steps` steps, "
             "timed after its imports (data loading, evaluations and samples included; the JAX side compiles "
             "every program it uses in it); `step`: the median step from the `warm`-th on in that run, timed "
             "where the loop records the step's values (a REINFORCE step is an episode, a time-sequence step "
             "an LBFGS step). Ratios are paired by round.", "",
             "| loop | what | dtype | steps | run torch s | run JAX s | run ratio | step torch ms | step JAX ms "
             "| step ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in data["cases"].items():
        t, j = row["torch"], row["jax"]
        lines.append(f"| {name} | {row['what']} | {row['dtype']} | {row['steps']} | {t['run_s']:.2f} | "
                     f"{j['run_s']:.2f} | {row['run_ratio']:.2f} | {t['step_ms']:.2f} | {j['step_ms']:.2f} | "
                     f"{row['step_ratio']:.2f} |")
    return lines


def _section_gpu(results_dir: Path) -> list[str]:
    """The runs on a GPU (``benchmarks/run_gpu.sh``): ``gpu_throughput.json``, ``train_step_cuda*.json`` and
    ``optim_update_cuda.json``, if any."""
    optim = _load(results_dir, "optim_update_cuda")
    throughput = _load(results_dir, "gpu_throughput")
    return ((_section_gpu_throughput(throughput) if throughput and not throughput.get("smoke") else [])
            + _section_gpu_train_step(results_dir) + (_section_gpu_optim(optim) if optim else []))


def _mib(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def _xla_total(analysis: dict[str, float] | None) -> float | None:
    """XLA's account of a compiled step in MiB: arguments + outputs + temporaries (``None`` without one)."""
    if not analysis:
        return None
    return sum(analysis.get(k, 0) for k in ("argument_size", "output_size", "temp_size"))


def _peak(row: dict[str, Any], mode: str, *, jax: bool) -> float | None:
    """A run's peak memory in MiB; JAX's inference peak is XLA's account (the process peak is training's)."""
    if jax and mode == "infer":
        return _xla_total(row[mode].get("xla_memory_analysis"))
    return row[mode].get("peak_mib")


_PRECISIONS = ("float32", "tf32", "bf16")


def _section_gpu_throughput(data: dict[str, Any]) -> list[str]:
    m = _machine(data)
    lines = ["## Throughput at training sizes on a GPU", "",
             f"`benchmarks/gpu_throughput.py` (`benchmarks/run_gpu.sh`, {m.get('date', '')[:16]}) on "
             f"{m.get('gpus', 1)} x {m.get('gpu', 'GPU')}: torch {m.get('torch', '?')} (CUDA "
             f"{m.get('torch_cuda', '?')}) eager with `cudnn.benchmark` and `torch.compile` (default mode); jax "
             f"{m.get('jax', '?')}, `jax_impl.train.train_step` (batch an argument, state donated) and one jitted "
             "eval forward. SGD with momentum, random data, NCHW. Images per second: the median of 5 blocks of 10 "
             "back-to-back steps, each block ending with one device synchronisation; each (case, precision, "
             "framework) in a fresh process. `float32` is TF32 off on both sides; `tf32` turns TF32 on for "
             "convolutions and GEMMs on both sides (torch's `torch.backends.cudnn.allow_tf32` and "
             "`torch.backends.cuda.matmul.allow_tf32`, jax_impl's `jax_impl.backends.cudnn` / `.cuda` switches); "
             "`bf16` is autocast on both sides (JAX: `train_step(..., autocast=jnp.bfloat16)`). Ratio: JAX "
             "images/s over torch's (above 1, JAX is faster). Peak: torch's `max_memory_allocated` over the "
             "timed steps; JAX training: the device's `peak_bytes_in_use` since its process started (compiling "
             "included); JAX inference (compiled in the same process after training): XLA's account of the "
             "compiled forward (arguments + outputs + temporaries); in MiB.", ""]
    runs = data.get("runs", [])

    def find(framework: str, case: str, precision: str, env: bool = False) -> dict[str, Any] | None:
        for row in runs:
            if (row["framework"], row["case"], row["precision"], bool(row.get("env"))) == (framework, case, precision,
                                                                                            env):
                return row
        return None

    if len(data.get("calls", [])) > 1:
        # A row's torch eager and JAX share a run; torch.compile, slow to build, may come from another one.
        groups: dict[tuple[str, str], list[str]] = {}
        for case in data.get("cases", {}):
            for precision in _PRECISIONS:
                pair = [r for r in (find("jax", case, precision), find("torch", case, precision)) if r]
                if pair:
                    measured, commit = min((r.get("measured", ""), r.get("commit", "")) for r in pair)
                    call = max((c for c in data["calls"] if c <= measured), default=measured)
                    groups.setdefault((call[:16], commit), []).append(f"{case} {precision}")
        lines += [f"Measured in {len(data['calls'])} runs on the same kind of machine, each row's torch eager and "
                  "JAX in the same run (torch.compile's in the same run or another): "
                  + "; ".join(f"{d}" + (f" (code at {c})" if c else "") + ": " + ", ".join(names)
                              for (d, c), names in sorted(groups.items())) + ".", ""]

    for case in data.get("cases", {}):
        lines += [f"**{case}**", "",
                  "| precision | mode | torch img/s | torch.compile img/s | JAX img/s | JAX / torch | "
                  "JAX / torch.compile | torch peak | torch.compile peak | JAX peak |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for precision in _PRECISIONS:
            eager, compiled = find("torch", case, precision), find("torch_compile", case, precision)
            ours = find("jax", case, precision)
            if not (eager or compiled):
                continue
            for mode in ("train", "infer"):
                def rate(row: dict[str, Any] | None) -> float | None:
                    return row[mode]["images_per_s"] if row else None

                def ratio(a: float | None, b: float | None) -> str:
                    return f"{a / b:.2f}" if a and b else "-"

                cells = [rate(eager), rate(compiled), rate(ours)]
                lines.append(f"| {precision} | {mode} | " + " | ".join("-" if c is None else f"{c:.0f}" for c in cells)
                             + f" | {ratio(cells[2], cells[0])} | {ratio(cells[2], cells[1])} | "
                             + " | ".join(_mib(_peak(row, mode, jax=row is ours)) if row else "-"
                                          for row in (eager, compiled, ours)) + " |")
        lines.append("")
    memory = []
    for case in data.get("cases", {}):
        for env in (False, True):
            row = find("jax", case, "float32", env)
            if row is None:
                continue
            train = row["train"]
            xla = train.get("xla_memory_analysis", {})
            memory.append(f"| {case} | {'level 0' if env else 'default'} | "
                          f"{_mib(train.get('memory_after_compile', {}).get('peak_bytes_in_use'))} | "
                          f"{_mib(train.get('memory_after_steps', {}).get('peak_bytes_in_use'))} | "
                          f"{_mib(_xla_total(xla))} | "
                          f"{_mib(xla.get('temp_size'))} | {train['images_per_s']:.0f} | {train['compile_s']:.0f} |")
    if memory:
        lines += ["Where JAX's peak comes from (float32 training): the device's peak right after compiling the step "
                  "and after the timed steps, against XLA's own account of the compiled step (arguments + outputs "
                  "+ temporaries), with XLA's "
                  "convolution autotuning at its default and off (`--xla_gpu_autotune_level=0`).", "",
                  "| case | autotuning | peak after compile | peak after steps | XLA args+out+temp | XLA temp | "
                  "train img/s | compile s |", "|---|---|---|---|---|---|---|---|", *memory, ""]
    skipped = data.get("skipped", [])
    if skipped:
        lines += ["Not measured: " + "; ".join(
            f"{s['framework']} {s['case']} {s['precision']}{' ' + ' '.join(s['env'].values()) if s.get('env') else ''}"
            f" ({s['reason'].splitlines()[-1][:120] if s['reason'] else ''})" for s in skipped) + ".", ""]
    return lines


def _section_gpu_optim(data: dict[str, Any]) -> list[str]:
    m = _machine(data)
    lines = ["## Optimizer update on a GPU", "",
             f"`benchmarks/optim_update.py --device cuda` (`benchmarks/run_gpu.sh`, {data.get('date', '')[:16]}) on "
             f"{m.get('gpu', 'GPU')}: torch {m.get('torch', '?')} (CUDA {m.get('torch_cuda', '?')}) with its CUDA "
             "default, the multi-tensor `foreach` path, each step ending with `torch.cuda.synchronize()`; jax "
             f"{m.get('jax', '?')}, the same jitted, donated update as on CPU, `block_until_ready`. `ieee` is the "
             "sqrt mode that matches torch on CUDA. The 1.1x bar of the CPU table applies to ours/optax.", ""]
    return lines + _optim_table(data, ms_digits=3, mkl=False, torch_ratio_digits=2) + [""]


def _section_gpu_train_step(results_dir: Path) -> list[str]:
    runs = [json.loads(p.read_text()) for p in sorted(results_dir.glob("train_step_cuda*.json"))]
    if not runs:
        return []
    runs.sort(key=lambda data: _machine(data).get("date", ""))
    m = _machine(runs[0])
    lines = ["## Train step and inference on a GPU", "",
             f"`benchmarks/train_step.py --device cuda [--tf32]` (`benchmarks/run_gpu.sh`) on {m.get('gpus', 1)} x "
             f"{m.get('gpu', 'GPU')} ({m.get('cpu', '')}, {m.get('logical_cores', '?')} cores): torch "
             f"{m.get('torch', '?')} (CUDA {m.get('torch_cuda', '?')}) eager, each call ending with "
             f"`torch.cuda.synchronize()`; jax {m.get('jax', '?')}, one jitted step, `block_until_ready`. The same "
             "cases and pairing as above. TF32 off is the parity setting (both sides full float32: torch's "
             "`allow_tf32` flags off, JAX `highest`); TF32 on is the speed setting, which in these runs changed "
             "only torch (jax_impl's layers had no TF32 switch then; the throughput section above compares TF32 "
             "on both sides). No bar is set for GPUs.", "",
             "| run | TF32 | case | train torch ms | train JAX ms | train ratio | infer torch ms | infer JAX ms | "
             "infer ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for data in runs:
        date = _machine(data).get("date", "")[:16]
        for name, res in data["cases"].items():
            lines.append(f"| {date} | {'on' if data.get('tf32') else 'off'} | {name} | {_ms(res['train']['torch'])} | "
                         f"{_ms(res['train']['jax'])} | {res['train']['ratio']:.2f} | {_ms(res['infer']['torch'])} | "
                         f"{_ms(res['infer']['jax'])} | {res['infer']['ratio']:.2f} |")
    for data in runs:
        memory = {name: res["memory"] for name, res in data["cases"].items() if "memory" in res}
        if not memory:
            continue
        lines += ["", f"GPU memory of a train step, in MiB (run {_machine(data).get('date', '')[:16]}), each framework "
                  "in a fresh process, over compiling (JAX) or warming up (torch) and three steps: its own peak "
                  "(torch `max_memory_allocated`, JAX the device's `peak_bytes_in_use`, every allocation since the "
                  "process started), and XLA's scratch space for the compiled step (`memory_analysis()`). Where "
                  "JAX's peak is far above its arguments plus that scratch space (224x224: 2.4 GB against ~0.2 "
                  "GB), the peak was reached outside the step's execution, while compiling: XLA's convolution "
                  "autotuning runs candidate algorithms with their workspaces (the throughput section above "
                  "measures ResNet-18's CIFAR step with autotuning off).", "",
                  "| case | batch | torch peak | JAX peak | XLA temp |", "|---|---|---|---|---|"]
        for name, rows in memory.items():
            for batch, row in rows.items():
                t, j = row["torch"], row["jax"]
                lines.append(f"| {name} | {batch} | {t.get('device_peak_bytes', 0) / 2**20:.0f} | "
                             f"{j.get('device_peak_bytes', 0) / 2**20:.0f} | {j.get('xla_temp_bytes', 0) / 2**20:.0f} |")
    return lines + [""]


_SECTIONS = {
    "train_step": _section_train_step,
    "conv_speed": _section_conv,
    "optim_update": _section_optim,
    "dataloader_throughput": _section_loader,
    "parity_run": _section_parity_run,
    "random_draws": _section_random,
    "training_loops": _section_loops,
}


def render_markdown(results_dir: Path | None = None) -> str:
    """``docs/benchmarks.md`` from the JSON files in ``results_dir`` (missing benchmarks are listed as such)."""
    results_dir = Path(results_dir) if results_dir is not None else ROOT / "benchmarks" / "results"
    loaded = {name: _load(results_dir, name) for name in BENCHMARKS}
    lines = ["# Benchmarks", "",
             "Generated by `parity bench` from `benchmarks/results/*.json`; do not edit by hand. Every ratio is "
             "torch's median time over ours, measured in the same run: above 1, the JAX side is faster.", ""]
    machines = {name: _machine(data) for name, data in loaded.items() if data}
    if machines:
        first = next(iter(machines.values()))
        lines += ["Machine: " + ", ".join(f"{k} {first[k]}" for k in (
            "cpu", "logical_cores", "python", "jax", "jaxlib", "torch", "torch_threads", "torch_cpu_capability", "platform",
            "glibc_tunables", "transparent_hugepage")
            if first.get(k) not in (None, "")), ""]
    for name, data in loaded.items():
        if data is None:
            lines += [f"## {name}", "", f"Not measured (no `{name}.json`): {BENCHMARKS[name].about}.", ""]
            continue
        lines += _SECTIONS[name](data)
        date = data.get("date") or _machine(data).get("date")
        if date:
            lines += ["", f"Measured {date}."]
        lines.append("")
        if name == "train_step":
            lines += _section_by_cpu(results_dir)
    lines += _section_gpu(results_dir)
    return "\n".join(lines)
