"""``parity bench``: the report renders every benchmark's JSON; bad input is an error, not a silent skip.

The benchmarks themselves are not run here (timings are never tests); the
report is rendered from small JSON files shaped like each script's output.
"""

from __future__ import annotations

import json

import pytest

from parity import bench
from parity.cli import main

_T = {"median_ms": 2.0, "min_ms": 1.5}
_MACHINE = {"cpu": "Test CPU", "logical_cores": 2, "jax": "0.0", "torch": "0.0"}

FAKE = {
    "train_step": {"machine": _MACHINE, "cases": {"lenet_b256": {
        "train": {"torch": _T, "jax": {"median_ms": 4.0}, "ratio": 0.5},
        "infer": {"torch": _T, "jax": _T, "ratio": 1.0},
        "memory": {"64": {"torch": {"peak_rss_growth_bytes": 3 << 20, "torch_saved_bytes": 2 << 20},
                          "jax": {"peak_rss_growth_bytes": 5 << 20, "xla_temp_bytes": 1 << 20}}}}}},
    "conv_speed": {"machine": _MACHINE, "date": "2026-01-01", "convs": {"lenet_c1": {
        m: {"torch": _T, "plain": _T, "fast": _T, "torch_over_plain": 1.0, "torch_over_fast": 1.0}
        for m in ("fwd", "fb")}}},
    "optim_update": {"machine": _MACHINE, "results": {"sgd": {"optax": "optax.sgd(1e-2)",
        "times": {k: _T for k in ("step[mkl]", "step[ieee]", "update", "optax", "torch")},
        "ratios": {"step_ieee/optax": 1.0, "step_mkl/optax": 1.0}}}},
    "dataloader_throughput": {"cpus": 2, "dataset": "toy", "batch_size": 4, "results": [
        {"case": "in_memory", "num_workers": 0, "persistent_workers": False, "ours_batches_per_s": 10.0,
         "torch_batches_per_s": 5.0, "ratio_ours_over_torch": 2.0}]},
    "parity_run": {"machine": _MACHINE, "config": "configs/x.yaml", "repeats": 1, "steps": 3, "ratio": 0.5, "ways": {
        w: {"median_wall_s": 1.0, "runs": [{"wall_s": 1.0, "torch_loop_s": 0.1, "jax_loop_s": 0.2, "steps": 3}]}
        for w in ("torch", "jax", "both")}},
    "random_draws": {"machine": _MACHINE, "cases": {"randn_1m": {"what": "`randn(10**6)` float32", "jax_impl": _T,
                                                                 "torch": {"median_ms": 1.0}, "ratio": 0.5}}},
    "training_loops": {"machine": _MACHINE, "cases": {"vae": {
        "what": "VAE", "dtype": "float32", "steps": 20, "warm": 2, "run_ratio": 0.5, "step_ratio": 2.0,
        "torch": {"run_s": 1.0, "step_ms": 4.0}, "jax": {"run_s": 2.0, "step_ms": 2.0}}}},
}


def _write(folder, names):
    for name in names:
        (folder / f"{name}.json").write_text(json.dumps(FAKE[name]))


def test_fake_results_cover_every_benchmark():
    assert set(FAKE) == set(bench.BENCHMARKS)


def test_render_every_section(tmp_path):
    _write(tmp_path, FAKE)
    text = bench.render_markdown(tmp_path)
    assert "Machine: cpu Test CPU, logical_cores 2" in text
    assert "| lenet_b256 | 2.0 | 4.0 | 0.50 | 2.0 | 2.0 | 1.00 |" in text
    assert "| lenet_b256 | 64 | 3 | 5 | 2 | 1 |" in text  # memory in MiB
    assert "| lenet_c1 | 2.0 | 2.0 | 2.0 | 1.00 | 2.0 | 2.0 | 2.0 | 1.00 |" in text
    assert "| sgd | `optax.sgd(1e-2)` | 2.0 | 2.0 | 1.00 | 1.00 | 2.0 | 1.0 |" in text
    assert "| in_memory | 0 | False | 10 | 5 | 2.00 |" in text
    assert "Ratio torch-only wall / JAX-only wall: 0.50." in text
    assert "| randn_1m | `randn(10**6)` float32 | 2.000 | 1.000 | 0.50 |" in text
    assert "| vae | VAE | float32 | 20 | 1.00 | 2.00 | 0.50 | 4.00 | 2.00 | 2.00 |" in text
    assert "Not measured" not in text


def test_train_step_compile_columns_and_flop_rates(tmp_path):
    """``--compile`` adds torch.compile's times and ratio; counted FLOPs become GFLOP/s beside the GEMM peak."""
    data = json.loads(json.dumps(FAKE["train_step"]))
    case = data["cases"]["lenet_b256"]
    for mode in ("train", "infer"):
        case[mode]["torch_compile"] = {"median_ms": 1.0}
        case[mode]["compile_ratio"] = 0.25
    case["flops"] = {"train": 8_000_000_000, "infer": 2_000_000_000}
    data["peak_gflops"] = {"torch": 100.0, "jax": 200.0}
    (tmp_path / "train_step.json").write_text(json.dumps(data))
    text = bench.render_markdown(tmp_path)
    assert "| lenet_b256 | 2.0 | 1.0 | 4.0 | 0.50 | 0.25 | 2.0 | 1.0 | 2.0 | 1.00 | 0.25 |" in text
    # 8 GFLOP in 2 ms (torch) and 4 ms (JAX): 4000 and 2000 GFLOP/s, against the higher peak (200).
    assert "| lenet_b256 | 8.00 | 4000 | 2000 | 2000 | 1000 | 2.00 | 1000 | 1000 |" in text
    assert "torch 100, XLA 200 GFLOP/s" in text


def test_missing_results_are_named(tmp_path):
    _write(tmp_path, ["conv_speed"])
    text = bench.render_markdown(tmp_path)
    for name in set(bench.BENCHMARKS) - {"conv_speed"}:
        assert f"Not measured (no `{name}.json`)" in text


def test_cli_render_only(tmp_path, capsys):
    _write(tmp_path, FAKE)
    out = tmp_path / "bench.md"
    assert main(["bench", "--render-only", "--results-dir", str(tmp_path), "--markdown", str(out)]) == 0
    assert out.read_text() == bench.render_markdown(tmp_path)


def test_cli_unknown_benchmark(capsys):
    assert main(["bench", "nope", "--render-only"]) == 2
    assert "unknown benchmark(s) ['nope']" in capsys.readouterr().err


def test_run_benchmarks_rejects_unknown():
    with pytest.raises(KeyError, match="unknown benchmark"):
        bench.run_benchmarks(["nope"])


def test_a_full_train_step_run_times_torch_compile_and_a_quick_one_does_not(tmp_path, monkeypatch):
    """The report's torch.compile columns come from ``parity bench`` itself: a full train_step run passes
    ``--compile``; a quick run (a smoke test) passes its own short arguments instead."""
    import subprocess

    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setattr(bench, "keep_cpu_run", lambda path: None)
    for quick in (False, True):
        bench.run_benchmarks(["train_step"], quick=quick, results_dir=tmp_path)
    full, quick = commands
    assert "--compile" in full and "--repeats" not in full
    assert "--compile" not in quick and "--repeats" in quick


def test_scripts_exist_and_document_themselves():
    folder = bench.benchmarks_dir()
    for b in bench.BENCHMARKS.values():
        text = (folder / b.script).read_text()
        assert text.startswith('"""') and "--json" in text, b.script


def _common():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "_common.py"
    spec = importlib.util.spec_from_file_location("_bench_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paired_ratio_cancels_a_drift_between_rounds():
    common = _common()
    # A slow phase (2x) covers JAX's blocks of rounds 1-2 and torch's of round 1 only; the host
    # is otherwise steady with torch 10 ms and JAX 11 ms.
    ours = {"median_ms": 11.0, "round_medians_ms": [22.0, 22.0, 11.0, 11.0, 11.0]}
    torch_t = {"median_ms": 10.0, "round_medians_ms": [20.0, 10.0, 10.0, 10.0, 10.0]}
    assert common.paired_ratio(torch_t, ours) == pytest.approx(10 / 11)
    with pytest.raises(ValueError):  # rounds must pair up
        common.paired_ratio(torch_t, {"round_medians_ms": [11.0]})


def test_gpu_runs_render_their_own_section(tmp_path):
    """``train_step_cuda*.json`` (benchmarks/run_gpu.sh) adds a GPU section, TF32 marked, GPU memory in MiB."""
    _write(tmp_path, FAKE)
    assert "on a GPU" not in bench.render_markdown(tmp_path)
    machine = dict(_MACHINE, gpu="Test GPU", gpus=1, torch_cuda="13.0", date="2026-01-02T03:04:05")
    case = json.loads(json.dumps(FAKE["train_step"]["cases"]["lenet_b256"]))
    case["memory"]["64"]["torch"]["device_peak_bytes"] = 7 << 20
    case["memory"]["64"]["jax"]["device_peak_bytes"] = 9 << 20
    (tmp_path / "train_step_cuda.json").write_text(json.dumps({"machine": machine, "tf32": False,
                                                                "cases": {"lenet_b256": case}}))
    (tmp_path / "train_step_cuda_tf32.json").write_text(json.dumps({"machine": machine, "tf32": True,
                                                                     "cases": {"lenet_b256": case}}))
    text = bench.render_markdown(tmp_path)
    assert "## Train step and inference on a GPU" in text and "1 x Test GPU" in text
    assert "| 2026-01-02T03:04 | off | lenet_b256 | 2.0 | 4.0 | 0.50 | 2.0 | 2.0 | 1.00 |" in text
    assert "| 2026-01-02T03:04 | on | lenet_b256 |" in text
    assert "| lenet_b256 | 64 | 7 | 9 | 1 |" in text


def test_benchmark_env_puts_malloc_on_huge_pages_unless_the_user_set_tunables(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert bench.benchmark_env()["GLIBC_TUNABLES"] == bench.HUGETLB_TUNABLE
    assert "GLIBC_TUNABLES" not in bench.benchmark_env(hugetlb=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    assert bench.benchmark_env()["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=1"


def test_gpu_optimizer_run_renders_its_own_section(tmp_path):
    """``optim_update_cuda.json`` (``optim_update.py --device cuda``) adds a GPU optimizer table, ours vs optax."""
    _write(tmp_path, FAKE)
    data = json.loads(json.dumps(FAKE["optim_update"]))
    data["machine"] = dict(_MACHINE, gpu="Test GPU", gpus=1, torch_cuda="13.0")
    data["date"] = "2026-01-02T03:04:05+00:00"
    data["results"]["sgd"]["times"]["torch"] = {"median_ms": 0.5}
    data["results"]["sgd"]["times"]["step[ieee]"] = {"median_ms": 0.25}
    (tmp_path / "optim_update_cuda.json").write_text(json.dumps(data))
    text = bench.render_markdown(tmp_path)
    assert "## Optimizer update on a GPU" in text and "2026-01-02T03:04) on Test GPU" in text
    assert "| sgd | `optax.sgd(1e-2)` | 2.000 | 0.250 | 1.00 | 0.500 | 2.00 |" in text


def test_gpu_throughput_rows_name_the_run_that_measured_them(tmp_path):
    """``gpu_throughput.json`` merged over two calls: each (case, precision) names its own run and commit."""
    _write(tmp_path, FAKE)

    def row(framework, case, precision, measured, commit, rate):
        modes = {m: {"images_per_s": rate, "peak_mib": 100.0, "compile_s": 1.0} for m in ("train", "infer")}
        return dict(framework=framework, case=case, precision=precision, env={}, measured=measured, commit=commit,
                    **modes)

    first, second = "2026-01-02T03:00:00+00:00", "2026-01-02T05:00:00+00:00"
    runs = [row("jax", "a", "float32", "2026-01-02T03:01:00+00:00", "aaa", 200.0),
            row("torch", "a", "float32", "2026-01-02T03:02:00+00:00", "aaa", 100.0),
            row("jax", "a", "bf16", "2026-01-02T05:01:00+00:00", "bbb", 300.0),
            row("torch", "a", "bf16", "2026-01-02T05:02:00+00:00", "bbb", 100.0),
            row("torch_compile", "a", "bf16", "2026-01-02T05:03:00+00:00", "bbb", 150.0)]
    data = {"machine": dict(_MACHINE, gpu="Test GPU", gpus=1, torch_cuda="13.0", date=first), "smoke": False,
            "cases": {"a": {}}, "runs": runs, "skipped": [], "calls": [first, second]}
    (tmp_path / "gpu_throughput.json").write_text(json.dumps(data))
    text = bench.render_markdown(tmp_path)
    assert ("2026-01-02T03:00 (code at aaa): a float32; 2026-01-02T05:00 (code at bbb): a bf16." in text)
    assert "| float32 | train | 100 | - | 200 | 2.00 | - | 100 | - |" in text
    assert "| bf16 | train | 100 | 150 | 300 | 3.00 | 2.00 | 100 | 100 |" in text


def test_each_cpu_makers_last_run_is_kept_and_tabled(tmp_path):
    """A full CPU train_step run is kept per CPU maker; the report tables every maker's ratios side by side."""
    for cpu, ratio in (("Intel(R) Xeon(R) Processor", 0.5), ("AMD EPYC", 1.5)):
        data = json.loads(json.dumps(FAKE["train_step"]))
        data["machine"] = dict(_MACHINE, cpu=cpu, date="2026-01-02T00:00:00")
        data["cases"]["lenet_b256"]["train"]["ratio"] = ratio
        data["peak_gflops"] = {"torch": 100.0, "jax": 200.0}
        (tmp_path / "train_step.json").write_text(json.dumps(data))
        kept = bench.keep_cpu_run(tmp_path / "train_step.json")
        assert kept.name == f"train_step_cpu_{bench.cpu_maker(cpu)}.json"
    assert sorted(p.name for p in tmp_path.glob("train_step_cpu_*.json")) == [
        "train_step_cpu_amd.json", "train_step_cpu_intel.json"]
    text = bench.render_markdown(tmp_path)
    assert "| case | AMD EPYC train | AMD EPYC infer | Intel(R) Xeon(R) Processor train |" in text
    assert "| lenet_b256 | 1.50 | 1.00 | 0.50 | 1.00 |" in text
    assert "- AMD EPYC: torch 0.0, jax 0.0, float32 GEMM peak torch 100 / XLA 200 GFLOP/s, measured 2026-01-02." in text


def test_a_gpu_train_step_run_is_not_kept_as_a_cpu_one(tmp_path):
    data = dict(FAKE["train_step"], device="cuda")
    (tmp_path / "train_step_cuda.json").write_text(json.dumps(data))
    assert bench.keep_cpu_run(tmp_path / "train_step_cuda.json") is None
    assert not list(tmp_path.glob("train_step_cpu_*"))
    assert bench.cpu_maker("Some Vendor Chip 9") == "some"
