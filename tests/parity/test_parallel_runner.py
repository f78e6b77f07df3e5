"""Data-parallel runs through the runner: torch DDP (gloo ranks) vs JAX on N host devices, reported like a
single-device run (per-epoch rows, held-out accuracy, torch's float32 floor), and the run folder when a run
stops."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import parity.checkpoint
import parity.parallel
import parity.parallel_runner
from jax_impl.parallel import free_port
from parity.cli import main
from parity.config import load_config
from parity.experiment import run_experiment
from tests._cpu import AVX512


@pytest.mark.slow  # ~35 s: 2 torch ranks twice (float32 and its float64 floor) and a JAX process
@pytest.mark.parametrize("world_size", [2])  # 4 ranks: tests/parallel/test_ddp.py and the 2 x 2 host test below
def test_the_default_config_passes_on_n_ranks(tmp_path, world_size):
    """`parity run parallel.world_size=N` on the default config (LeNet, digits, Adam, StepLR). Adam at lr 5e-3
    turns rounding into lr-sized steps: torch's own float32 DDP run ends 0.29 (max rel, fc2.weight, N=2) from
    its float64 twin, while JAX stays 1.8e-4 from torch's float32 run (per-step losses within 2e-7 for 60
    steps). Beyond rtol 1e-4, three orders of magnitude inside the floor: passed by the floor, per epoch
    rows with accuracy and agreement, strict JSON without NaN."""
    cfg = load_config("lenet_digits", [f"parallel.world_size={world_size}"])
    report = run_experiment(cfg, runs_dir=tmp_path, progress=False)
    assert report.passed, report.message
    assert len(report.epochs) == 3 and len(report.steps) == report.total_steps
    for epoch in report.epochs:
        assert epoch.agreement >= 0.99 and not math.isnan(epoch.torch_accuracy) and epoch.floor_max_rel > 0
        assert not math.isnan(epoch.param_max_abs) and not math.isnan(epoch.jax_seconds)
    # Measured 1.8e-4 (N=2) on AVX-512 CPUs: JAX nowhere near the floor. On an AVX2 one the kernels of both
    # sides round otherwise (tests/_cpu.py) and Adam amplifies it as it does torch's own: 0.29, at the floor.
    assert not AVX512 or report.epochs[-1].param_max_rel <= 1e-3
    text = (tmp_path / report.run_dir.split("/")[-1] / "report.json").read_text()
    assert "NaN" not in text and json.loads(text)["epochs"][0]["leaves"]


TRANSFORM = "data.transform=[{name: RandomCrop, size: 8, padding: 1}, {name: RandomHorizontalFlip}]"


# Three options of a float64 pmap run in one run: each takes its own code path (the schedule, the initial
# weights, the loaders), and any one of them wrong breaks the strict bar.
@pytest.mark.slow  # ~15 s: 2 torch ranks and a JAX process start
def test_parallel_config_with_a_scheduler_own_init_and_random_transforms_in_float64(tmp_path):
    """lenet_digits_ddp on 2 ranks (pmap) in float64 with

    * a per-epoch StepLR: torch's scheduler on each DDP rank vs JAX's schedule; the lr column follows it;
    * model.init: seed: every JAX replica starts from jax_impl's own init after the seed (torch's draws,
      from jax_impl.random), DDP's ranks from torch's; the report says how far apart they started
      (identical);
    * data.transform with random transforms: each torch rank's loader crops and flips its samples with
      torch_ref's transforms, drawing from its global generator (seed + rank), each JAX replica's with
      jax_impl's from its rank's generator; the held-out samples go through the same transforms once,
      seeded with train.seed on both sides.

    30 steps cross the first epoch boundary (23 steps per epoch: 1438 samples, 2 ranks, batch 32): two
    epoch rows, the second a partial one. float64 is strict: measured 3.4e-16, bar 1e-10; held-out accuracy
    0.106 on both sides."""
    cfg = load_config("lenet_digits_ddp", ["scheduler={name: StepLR, step_size: 1, gamma: 0.5}", "model.init=seed",
                                           TRANSFORM, "train.dtype=float64", "data.batch_size=32",
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=30, runs_dir=tmp_path, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert [e.steps for e in report.epochs] == [23, 30] and math.isnan(report.epochs[0].floor_max_rel)
    assert report.steps[22]["lr"] == 2 * report.steps[23]["lr"]
    assert "each framework's own init after seed 0 (model.init: seed), identical to torch's" in report.init
    assert report.epochs[-1].agreement == 1.0 and report.epochs[-1].torch_accuracy > 0.1


@pytest.mark.slow  # ~5 s
@pytest.mark.parametrize("only", ["torch"])  # jax: the straight run of the stopped-and-resumed run below
def test_one_framework_alone(tmp_path, only):
    """--only with parallel: one side trains on its N ranks / devices; accuracy, no comparison."""
    cfg = load_config("configs/lenet_digits_ddp.yaml", ["train.epochs=1"])
    report = run_experiment(cfg, only=only, runs_dir=tmp_path, progress=False)
    assert report.passed and report.verdict().startswith(f"TRAINED ({only} only")
    epoch = report.epochs[-1]
    assert not math.isnan(getattr(epoch, f"{only}_accuracy")) and math.isnan(epoch.agreement)


USER_MODEL = ('model={torch: "tests.parity._dp_models:TorchNet", jax: "tests.parity._dp_models:JaxNet", '
              'kwargs: {width: 4}}')


# Options of a user's net share a run where their code paths are apart: SyncBatchNorm with accumulation (JAX's
# plain and accumulating steps take each micro-batch's loss and gradients from one function, which the first
# case runs without accumulation), dropout with clipping and accumulation.
@pytest.mark.slow  # ~10 s each: 2 torch ranks (or one process: the SyncBatchNorm reference), then 2 JAX devices
@pytest.mark.parametrize(("sync_bn", "dropout", "mode", "clip", "accumulate"), [(False, 0.0, "sharded", None, 1),
                                                                               (True, 0.0, "sharded", None, 3),
                                                                               (False, 0.5, "pmap", 0.05, 2)])
def test_a_users_model_by_import_path_runs_data_parallel(tmp_path, sync_bn, dropout, mode, clip, accumulate):
    """A user's conv net with BatchNorm (tests/parity/_dp_models.py), named by import path, on 2 ranks in
    float64: torch DDP (or, with SyncBatchNorm, torch's global-batch reference) vs JAX's step, crossing an
    epoch of 23 batches. With dropout each torch rank draws from its own generator (seeded seed + rank) and
    so does each JAX replica, loader base seeds included; clip_grad_norm clips DDP's averaged gradients on
    every rank (at 0.05 it clips every step). train.accumulate k: each torch rank runs its first
    micro-batches under ddp.no_sync() and all-reduces the summed gradients on the last (SyncBatchNorm:
    torch's global-batch reference on CPU), the JAX step sums each replica's micro-batch gradients and
    averages once; 23 batches make 23, 12 (k=2) or 8 (k=3) optimizer steps an epoch, the last group
    shorter and its last batch partial. float64 is strict: parameters and running statistics within 1e-10
    (measured 2.6e-15 or below)."""
    model = USER_MODEL.replace("width: 4", f"width: 4, dropout: {dropout}")
    clipped = [] if clip is None else [f"train.clip_grad_norm={clip}"]
    cfg = load_config("lenet_digits_ddp", [model, *clipped, "train.dtype=float64", f"parallel.jax_mode={mode}",
                                           f"parallel.sync_bn={str(sync_bn).lower()}", "data.batch_size=32",
                                           f"train.accumulate={accumulate}",
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    per_epoch = -(-23 // accumulate)
    steps = per_epoch + per_epoch // 2
    report = run_experiment(cfg, max_steps=steps, runs_dir=tmp_path, progress=False)
    assert [e.steps for e in report.epochs] == [per_epoch, steps]
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.epochs[-1].buffer_max_rel <= 1e-10 and report.epochs[-1].agreement == 1.0
    assert set(report.epochs[-1].leaves) == {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight",
                                             "fc.bias", "bn.running_mean", "bn.running_var"}


@pytest.mark.slow  # ~40 s: 2 torch ranks twice (bf16 autocast in float32, its float64 twin), 2 JAX devices
def test_bf16_autocast_runs_data_parallel(tmp_path):
    """train.autocast: bfloat16 on 2 ranks, LeNet on digits: each torch rank's forward under
    torch.autocast("cpu", dtype=torch.bfloat16), each JAX replica's under jax_impl.amp.autocast, evaluation
    too; the float64 twin runs without autocast. Measured over the epoch (23 steps): parameters 1.9e-5
    apart (within the config's rtol 1e-4), torch's own bf16 run 1.0e-2 from its float64 twin, every step's
    loss within tolerance; longer runs reach bf16 rounding chaos, where the floor verdict decides."""
    cfg = load_config("lenet_digits_ddp", ["train.autocast=bfloat16", "train.epochs=1", "data.batch_size=32"])
    report = run_experiment(cfg, runs_dir=tmp_path, progress=False)
    assert report.passed, report.message
    assert report.first_divergent_step is None or report.first_divergent_step >= 5
    assert report.epochs[-1].agreement >= 0.9


def test_parallel_config_rejects_what_it_cannot_run(tmp_path, capsys):
    args = ["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), "configs/lenet_digits_ddp.yaml"]
    crop = "data.transform=[{name: RandomCrop, size: 8, padding: 1}]"
    assert main([*args, crop, "parallel.sync_bn=true"]) == 2  # the CPU reference has no ranks to transform on
    assert "data.transform with SyncBatchNorm on CPU is not supported" in capsys.readouterr().err
    assert main([*args, "optimizer.lr=-1"]) == 2  # torch's own check, in the launching process, before any rank
    assert "cannot build the experiment: ValueError: Invalid learning rate" in capsys.readouterr().err
    dropout = USER_MODEL.replace("width: 4", "width: 4, dropout: 0.5")
    assert main([*args, dropout, "parallel.jax_mode=vmap"]) == 2  # vmap's replicas share one draw
    assert "dropout in a data-parallel run is not supported with jax_mode vmap" in capsys.readouterr().err
    assert main([*args, USER_MODEL.replace('jax: "tests.parity._dp_models:JaxNet"', "jax: auto")]) == 2
    assert "not jax: auto" in capsys.readouterr().err
    for flag in (["--allow-config-change"], ["--resume-from", "torch"]):
        assert main([*args, "--resume", str(tmp_path / "checkpoint.pt"), *flag]) == 2
        assert f"{flag[0]} is not supported for data-parallel runs" in capsys.readouterr().err
    assert main([*args, "parallel.backend=nccl"]) == (2 if not __import__("torch").cuda.is_available() else 0)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_an_interrupted_data_parallel_run_leaves_a_report(tmp_path, monkeypatch):
    """SIGINT while the ranks train: the run folder holds a report marked interrupted, not nothing."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel, "torch_reference", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(load_config("lenet_digits_ddp", ["train.epochs=1"]), runs_dir=tmp_path, progress=False)
    data = json.loads((tmp_path / caught.value.parity_run_dir.split("/")[-1] / "report.json").read_text())
    assert data["interrupted"] and not data["passed"] and data["verdict"].startswith("INTERRUPTED after 0")
    assert "no epoch was complete on every side" in data["message"]


@pytest.mark.slow  # ~40 s: a 2 x 2 run through the host launcher (4 torch ranks), then JAX alone as 4 x 1 and 1 x 4
def test_two_processes_of_two_devices_equal_four_processes(tmp_path):
    """The shape of two hosts (``parallel.processes=2``: two JAX processes of two devices, joined by
    jax.distributed; torch's 4 ranks see LOCAL_RANK/GROUP_RANK of that layout) computes the same bits as four
    processes of one device and as one process of four devices: the gradient mean is taken in rank order (no
    collective's summation order enters) and every JAX process runs the Eigen thread pool of the
    one-process layout (XLA:CPU splits convolution sums by the pool's size)."""
    overrides = ["parallel.world_size=4", "parallel.jax_mode=sharded", "train.floor=false"]
    # 12 steps, inside the first epoch (23 steps of 4 x 16 samples): each of the 7 JAX processes below compiles
    # its step once (the epoch's partial last batch would be a second compile in each).
    # The 2 x 2 run through the launcher for real hosts, here with both "hosts" on 127.0.0.1: one `parity run`
    # per host, each starting its 2 torch ranks and its JAX process; process 0 writes the report.
    port = free_port()
    command = [sys.executable, "-m", "parity", "run", "lenet_digits", *overrides, "--steps", "12", "--no-progress",
               "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    hosts = [subprocess.Popen([*command, "--process-id", str(i), "--runs-dir", str(tmp_path / f"host{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 0)]
    (out1, err1), (out0, err0) = (host.communicate(timeout=300) for host in hosts)
    assert [host.returncode for host in hosts] == [0, 0], err0[-2000:] + err1[-2000:]
    assert out1.startswith("process 1 of 2 trained its ranks") and not any((tmp_path / "host1").iterdir())
    two = json.loads(next((tmp_path / "host0").glob("*/report.json")).read_text())
    assert two["passed"] and "4 devices in 2 processes (2 each)" in two["verdict"], two["verdict"]
    four = run_experiment(load_config("lenet_digits", [*overrides, "parallel.processes=4"]), max_steps=12,
                          write=False, progress=False, only="jax")
    one = run_experiment(load_config("lenet_digits", overrides), max_steps=12, write=False, progress=False,
                         only="jax")
    assert len(two["steps"]) == 12 and [s["jax_loss"] for s in two["steps"]] == \
           [s["jax_loss"] for s in four.steps] == [s["jax_loss"] for s in one.steps]
    assert two["epochs"][-1]["jax_accuracy"] == four.epochs[-1].jax_accuracy == one.epochs[-1].jax_accuracy


@pytest.mark.slow  # ~40 s: JAX alone for 3 epochs, a data-parallel run stopped in JAX's third, its resume
def test_a_data_parallel_run_stopped_mid_way_keeps_its_whole_epochs_and_resumes(tmp_path, monkeypatch):
    """A user's net with BatchNorm and dropout 0.5 on 2 ranks (pmap), float32 beside its float64 twin,
    interrupted while JAX trains its third epoch (torch and its twin done): the report holds every step of
    the two epochs every side completed, checkpoint.pt resumes there, and the resumed run is the straight
    run, step for step (every torch, JAX and torch-float64 loss, the lr of StepLR: rank 0's and replica 0's
    model and optimizer state, torch's scheduler, the twin's state, the samplers' epoch, and every torch
    rank's and JAX replica's generator, so the masks and loader seeds after the resume are the ones the
    straight run drew) and ends on its state, bit for bit, in the first run's folder, one report from step
    0. Every parameter and BatchNorm running statistic is reported beside torch's own float32-vs-float64
    distance.

    The straight run: JAX's side is ``--only jax`` (one side trains on its devices; accuracy, no
    comparison), torch's and its twin's are the stopped run's, which train all 3 epochs before JAX starts."""
    import dataclasses

    import numpy as np

    overrides = [USER_MODEL.replace("width: 4", "width: 4, dropout: 0.5"), "data.batch_size=64",
                 "train.epochs=3", "scheduler={name: StepLR, step_size: 1, gamma: 0.5}"]
    alone = run_experiment(load_config("lenet_digits_ddp", overrides), only="jax", runs_dir=tmp_path / "jax",
                           progress=False)
    assert alone.passed and alone.verdict().startswith("TRAINED (jax only")
    assert not math.isnan(alone.epochs[-1].jax_accuracy) and math.isnan(alone.epochs[-1].agreement)
    straight = {"jax": {"losses": [s["jax_loss"] for s in alone.steps],
                        "state": parity.checkpoint.read_checkpoint(f"{alone.run_dir}/checkpoint.pt").jax["model"]}}
    real_torch_reference, real_jax_run = parity.parallel.torch_reference, parity.parallel.jax_run

    def whole(spec, initial, **kwargs):  # torch's side and its float64 twin: the straight run's
        side = "floor" if spec.dtype == "float64" else "torch"
        straight[side] = real_torch_reference(spec, initial, **kwargs)
        return straight[side]

    def stopped(spec, initial, **kwargs):  # JAX's run ends 5 steps into its third epoch, then Ctrl-C
        real_jax_run(dataclasses.replace(spec, steps=2 * 12 + 5), initial, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel, "torch_reference", whole)
    monkeypatch.setattr(parity.parallel, "jax_run", stopped)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False)
    folder = tmp_path / caught.value.parity_run_dir.split("/")[-1]
    data = json.loads((folder / "report.json").read_text())
    assert data["interrupted"] and "checkpoint.pt there" in data["message"]
    assert [s["step"] for s in data["steps"]] == list(range(24)) and [e["steps"] for e in data["epochs"]] == [12, 24]
    losses = {"torch_loss": "torch", "jax_loss": "jax", "torch_f64_loss": "floor"}
    for key, side in losses.items():
        assert [s[key] for s in data["steps"]] == straight[side]["losses"][:24], key
    assert not (folder / ".partial").exists()
    assert parity.checkpoint.read_checkpoint(folder / "checkpoint.pt").step == 24
    monkeypatch.setattr(parity.parallel, "torch_reference", real_torch_reference)
    monkeypatch.setattr(parity.parallel, "jax_run", real_jax_run)
    resumed = run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False,
                             resume=str(folder / "checkpoint.pt"))
    for key, side in losses.items():
        assert [s[key] for s in resumed.steps] == straight[side]["losses"], key
    assert [s["lr"] for s in resumed.steps] == [s["lr"] for s in alone.steps]
    assert [s["lr"] for s in resumed.steps] == pytest.approx([0.02 * 0.5 ** (i // 12) for i in range(36)])
    assert [e.steps for e in resumed.epochs] == [12, 24, 36] and resumed.passed, resumed.message
    assert resumed.epochs[-1].jax_accuracy == alone.epochs[-1].jax_accuracy
    assert resumed.run_dir == str(folder)
    end = parity.checkpoint.read_checkpoint(folder / "checkpoint.pt")  # the resumed run's last epoch
    for side, model in (("torch", end.torch["model"]), ("floor", end.torch["floor"]["model"]),
                        ("jax", end.jax["model"])):
        for name, value in straight[side]["state"].items():
            np.testing.assert_array_equal(model[name].numpy(), np.asarray(value), err_msg=f"{side} {name}")
    leaves = resumed.epochs[-1].leaves
    assert {"bn.running_mean", "bn.running_var", "conv.weight"} <= set(leaves)
    assert all(floor > 0 for _, floor in leaves.values())  # torch's own float32 distance, per tensor
    with pytest.raises(parity.checkpoint.CheckpointError, match="nothing to do"):
        run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False,
                       resume=str(folder / "checkpoint.pt"))


@pytest.mark.slow  # ~10 s: one data-parallel run of 2 epochs (vmap), without its float64 twin
def test_a_data_parallel_run_stopped_while_comparing_keeps_every_epoch(tmp_path, monkeypatch):
    """configs/lenet_digits_ddp.yaml (SGD, float32) with JAX's 2 replicas vmapped on one device, stopped by
    Ctrl-C after every side trained, while the runner compares them: the report holds both epochs (from the
    staged records), torch DDP (2 gloo ranks) and the vmapped replicas within the config's rtol 1e-4
    (measured 1.3e-7), and the staging folder is gone; with ``train.checkpoint: none`` an interrupted
    data-parallel run keeps the report of its whole epochs (as a single-device run does) and writes no
    checkpoint (the stopped run above writes one from the staged records). pmap and sharded: the default
    config above, the user-model runs."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel_runner, "judge", interrupted)
    cfg = load_config("lenet_digits_ddp", ["parallel.jax_mode=vmap", "data.batch_size=64", "train.epochs=2",
                                           "train.checkpoint=none", "train.floor=false"])
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(cfg, runs_dir=tmp_path, progress=False)
    folder = tmp_path / caught.value.parity_run_dir.split("/")[-1]
    data = json.loads((folder / "report.json").read_text())
    assert data["interrupted"] and "so no checkpoint.pt" in data["message"], data["message"]
    assert [s["step"] for s in data["steps"]] == list(range(24)) and [e["steps"] for e in data["epochs"]] == [12, 24]
    assert all(e["param_max_rel"] <= 1e-4 and e["agreement"] >= 0.99 for e in data["epochs"]), data["epochs"]
    assert not (folder / ".partial").exists() and not (folder / "checkpoint.pt").exists()


# The 2-JAX-process layout's options share the mnist example's run: accumulation, random transforms, dropout and
# the resume of JAX's generators gathered from its processes (torch's ranks and pmap's replicas resume theirs in
# the stopped-and-resumed run above, so the resume here is JAX's alone).
@pytest.mark.slow  # ~40 s: the example (2 torch ranks, 2 JAX processes), then JAX alone: an epoch, its resume
def test_the_mnist_example_runs_data_parallel_and_resumes_on_its_trajectory(tmp_path):
    """configs/mnist_example.yaml (the user's network with two dropouts and the user's data by import path,
    Adadelta, StepLR, NLLLoss, float64), narrower, on 2 ranks vs 2 JAX processes, with train.accumulate 2
    and random crops and flips: strict, measured 5.5e-16. Each torch rank runs its first micro-batch under
    ddp.no_sync() and all-reduces the summed gradients on the second, the JAX step sums each replica's
    micro-batch gradients and averages once: 12 batches an epoch make 6 optimizer steps, the last batch
    partial. Each rank's dropout masks, crops, flips and loader seeds draw from its own generator (torch's
    global one seeded seed + rank, its JAX replica's in the JAX processes); the held-out samples go through
    the same transforms once, seeded with train.seed on both sides. Then JAX alone: one epoch, and --resume
    to two equals the example's JAX side, every loss and the last state: the checkpoint holds every JAX
    replica's generator, gathered from the JAX processes."""
    import numpy as np

    transform = "data.transform=[{name: RandomCrop, size: 28, padding: 2}, {name: RandomHorizontalFlip}]"
    overrides = ["model.kwargs={c1: 4, c2: 8, hidden: 16, image_size: 28}", "parallel.world_size=2",
                 "parallel.jax_mode=sharded", "parallel.processes=2", "train.accumulate=2", transform]
    straight = run_experiment(load_config("mnist_example", overrides), runs_dir=tmp_path / "straight",
                              progress=False)
    assert straight.passed and straight.epochs[-1].param_max_rel <= 1e-10, straight.message
    assert [e.steps for e in straight.epochs] == [6, 12] and straight.epochs[-1].agreement == 1.0
    assert straight.epochs[-1].torch_accuracy > 0.1  # measured 0.161

    def alone(epochs, **kwargs):
        return run_experiment(load_config("mnist_example", [*overrides, f"train.epochs={epochs}"]), only="jax",
                              runs_dir=tmp_path, progress=False, **kwargs)

    resumed = alone(2, resume=f"{alone(1).run_dir}/checkpoint.pt")
    assert [s["jax_loss"] for s in resumed.steps] == [s["jax_loss"] for s in straight.steps]
    assert [e.steps for e in resumed.epochs] == [6, 12] and resumed.passed, resumed.message
    ends = [parity.checkpoint.read_checkpoint(f"{run.run_dir}/checkpoint.pt").jax["model"]
            for run in (straight, resumed)]
    for name, value in ends[0].items():
        np.testing.assert_array_equal(ends[1][name].numpy(), value.numpy(), err_msg=name)
