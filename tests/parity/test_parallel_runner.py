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
    assert report.epochs[-1].param_max_rel <= 1e-3  # measured 1.8e-4 (N=2): JAX is nowhere near the floor
    text = (tmp_path / report.run_dir.split("/")[-1] / "report.json").read_text()
    assert "NaN" not in text and json.loads(text)["epochs"][0]["leaves"]


@pytest.mark.slow  # ~20 s: 2 torch ranks and a JAX process start
@pytest.mark.parametrize("mode", ["vmap"])  # pmap and sharded: the default config above, the user-model runs below
def test_parallel_config_runs_torch_ddp_against_jax(tmp_path, mode):
    """configs/lenet_digits_ddp.yaml (SGD, float32): torch DDP (2 gloo ranks) vs JAX's 2 replicas. Full run
    (90 steps) measured 2.6e-7 (pmap); here 20 steps, bar 1e-4 by tolerance (not the floor)."""
    cfg = load_config("configs/lenet_digits_ddp.yaml", [f"parallel.jax_mode={mode}"])
    report = run_experiment(cfg, max_steps=20, runs_dir=tmp_path, progress=False)
    assert report.passed and report.passed_by == "tolerance", report.message
    assert len(report.steps) == 20 and (tmp_path / report.run_dir / "report.json").exists()


@pytest.mark.slow  # ~25 s
def test_parallel_config_with_a_scheduler_in_float64(tmp_path):
    """A per-epoch StepLR in float64: torch's scheduler on each DDP rank vs JAX's schedule; 60 steps cross
    the first epoch boundary (45 steps per epoch: 1438 samples, 2 ranks, batch 16). float64 is strict:
    measured 3e-15, bar 1e-10; two epoch rows, the second a partial one; the lr column follows StepLR."""
    cfg = load_config("configs/lenet_digits_ddp.yaml", ["scheduler={name: StepLR, step_size: 1, gamma: 0.5}",
                                                        "train.dtype=float64",
                                                        "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=60, runs_dir=tmp_path, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert [e.steps for e in report.epochs] == [45, 60] and math.isnan(report.epochs[0].floor_max_rel)
    assert report.steps[44]["lr"] == 2 * report.steps[45]["lr"]


@pytest.mark.slow  # ~15 s each
@pytest.mark.parametrize("only", ["torch", "jax"])
def test_one_framework_alone(tmp_path, only):
    """--only with parallel: one side trains on its N ranks / devices; accuracy, no comparison."""
    cfg = load_config("configs/lenet_digits_ddp.yaml", ["train.epochs=1"])
    report = run_experiment(cfg, only=only, runs_dir=tmp_path, progress=False)
    assert report.passed and report.verdict().startswith(f"TRAINED ({only} only")
    epoch = report.epochs[-1]
    assert not math.isnan(getattr(epoch, f"{only}_accuracy")) and math.isnan(epoch.agreement)


USER_MODEL = ('model={torch: "tests.parity._dp_models:TorchNet", jax: "tests.parity._dp_models:JaxNet", '
              'kwargs: {width: 4}}')


@pytest.mark.slow  # ~20 s each: 2 torch ranks, then 2 JAX devices (float64: no floor twin)
@pytest.mark.parametrize(("sync_bn", "dropout", "mode", "clip"), [(False, 0.0, "sharded", None),
                                                                  (True, 0.0, "sharded", None),
                                                                  (False, 0.5, "pmap", 0.05)])
def test_a_users_model_by_import_path_runs_data_parallel(tmp_path, sync_bn, dropout, mode, clip):
    """A user's conv net with BatchNorm (tests/parity/_dp_models.py), named by import path, on 2 ranks in
    float64: torch DDP (or, with SyncBatchNorm, torch's global-batch reference) vs JAX's step, 30 steps
    crossing an epoch (23 steps each). With dropout each torch rank draws from its own generator (seeded
    seed + rank) and so does each JAX replica, loader base seeds included; clip_grad_norm clips DDP's
    averaged gradients on every rank (at 0.05 it clips every step). float64 is strict: parameters and
    running statistics within 1e-10 (measured 2.2e-15 or below)."""
    model = USER_MODEL.replace("width: 4", f"width: 4, dropout: {dropout}")
    clipped = [] if clip is None else [f"train.clip_grad_norm={clip}"]
    cfg = load_config("lenet_digits_ddp", [model, *clipped, "train.dtype=float64", f"parallel.jax_mode={mode}",
                                           f"parallel.sync_bn={str(sync_bn).lower()}", "data.batch_size=32",
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=30, runs_dir=tmp_path, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.epochs[-1].buffer_max_rel <= 1e-10 and report.epochs[-1].agreement == 1.0
    assert set(report.epochs[-1].leaves) == {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight",
                                             "fc.bias", "bn.running_mean", "bn.running_var"}


@pytest.mark.slow  # ~20 s each: 2 torch ranks, then 2 JAX devices or processes (float64: no floor twin)
@pytest.mark.parametrize(("accumulate", "sync_bn", "dropout", "layout"), [
    (2, False, 0.0, ["parallel.jax_mode=pmap"]),
    (3, False, 0.5, ["parallel.jax_mode=sharded", "parallel.processes=2"]),
    (3, True, 0.0, ["parallel.jax_mode=sharded"]),
])
def test_gradient_accumulation_runs_data_parallel(tmp_path, accumulate, sync_bn, dropout, layout):
    """train.accumulate on 2 ranks, float64, a user's net with BatchNorm: each torch rank runs its first
    micro-batches under ddp.no_sync() and all-reduces the summed gradients on the last (SyncBatchNorm:
    torch's global-batch reference on CPU), the JAX step sums each replica's micro-batch gradients and
    averages once. 23 batches an epoch make 12 (k=2) or 8 (k=3) optimizer steps, the last group shorter and
    its last batch partial; 20 steps cross the epoch. Parameters and running statistics within 1e-10."""
    model = USER_MODEL.replace("width: 4", f"width: 4, dropout: {dropout}")
    cfg = load_config("lenet_digits_ddp", [model, "train.dtype=float64", "data.batch_size=32", *layout,
                                           f"train.accumulate={accumulate}", f"parallel.sync_bn={str(sync_bn).lower()}",
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=20 if accumulate == 2 else 14, runs_dir=tmp_path, progress=False)
    per_epoch = -(-23 // accumulate)
    assert [e.steps for e in report.epochs] == [per_epoch, 20 if accumulate == 2 else 14]
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.epochs[-1].buffer_max_rel <= 1e-10 and report.epochs[-1].agreement == 1.0


@pytest.mark.slow  # ~25 s each: 2 torch ranks, then 2 JAX devices or processes (float64: no floor twin)
@pytest.mark.parametrize("layout", [["parallel.jax_mode=pmap"], ["parallel.jax_mode=sharded", "parallel.processes=2"]])
def test_random_transforms_run_data_parallel(tmp_path, layout):
    """data.transform with random transforms on 2 ranks, float64: each torch rank's loader crops and flips
    its samples with torch_ref's transforms, drawing from its global generator (seed + rank), each JAX
    replica's with jax_impl's from its rank's generator; the held-out samples go through the same
    transforms once, seeded with train.seed on both sides. 30 steps cross an epoch: strict."""
    transform = "data.transform=[{name: RandomCrop, size: 8, padding: 1}, {name: RandomHorizontalFlip}]"
    cfg = load_config("lenet_digits_ddp", [transform, "train.dtype=float64", "data.batch_size=32", *layout,
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=30, runs_dir=tmp_path, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert report.epochs[-1].agreement == 1.0 and report.epochs[-1].torch_accuracy > 0.1


@pytest.mark.slow  # ~20 s: 2 torch ranks, then 2 JAX devices (float64: no floor twin)
def test_each_side_initialises_itself_in_a_data_parallel_run(tmp_path):
    """model.init: seed on 2 ranks, float64: every JAX replica starts from jax_impl's own init after the
    seed (torch's draws, from jax_impl.random), DDP's ranks from torch's; the report says how far apart
    they started (identical) and the run is strict."""
    cfg = load_config("lenet_digits_ddp", ["model.init=seed", "train.dtype=float64", "data.batch_size=64",
                                           "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"])
    report = run_experiment(cfg, max_steps=12, runs_dir=tmp_path, progress=False)
    assert "each framework's own init after seed 0 (model.init: seed), identical to torch's" in report.init
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message


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


@pytest.mark.slow  # ~40 s: 2 torch ranks, then 2 JAX processes
def test_the_mnist_example_runs_data_parallel(tmp_path):
    """configs/mnist_example.yaml (the user's network with two dropouts and the user's data by import path,
    Adadelta, StepLR, NLLLoss, float64), narrower, on 2 ranks vs 2 JAX processes: strict, measured 1e-15."""
    cfg = load_config("mnist_example", ["model.kwargs={c1: 4, c2: 8, hidden: 16, image_size: 28}",
                                        "parallel.world_size=2", "parallel.jax_mode=sharded",
                                        "parallel.processes=2"])
    report = run_experiment(cfg, runs_dir=tmp_path, progress=False)
    assert report.passed and report.epochs[-1].param_max_rel <= 1e-10, report.message
    assert len(report.epochs) == 2 and report.epochs[-1].agreement == 1.0


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


@pytest.mark.slow  # ~75 s: a 2 x 2 run through the host launcher (4 torch ranks), then JAX alone as 4 x 1 and 1 x 4
def test_two_processes_of_two_devices_equal_four_processes(tmp_path):
    """The shape of two hosts (``parallel.processes=2``: two JAX processes of two devices, joined by
    jax.distributed; torch's 4 ranks see LOCAL_RANK/GROUP_RANK of that layout) computes the same bits as four
    processes of one device and as one process of four devices: the gradient mean is taken in rank order (no
    collective's summation order enters) and every JAX process runs the Eigen thread pool of the
    one-process layout (XLA:CPU splits convolution sums by the pool's size)."""
    overrides = ["parallel.world_size=4", "parallel.jax_mode=sharded", "train.floor=false"]
    # The 2 x 2 run through the launcher for real hosts, here with both "hosts" on 127.0.0.1: one `parity run`
    # per host, each starting its 2 torch ranks and its JAX process; process 0 writes the report.
    port = free_port()
    command = [sys.executable, "-m", "parity", "run", "lenet_digits", *overrides, "--steps", "30", "--no-progress",
               "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    hosts = [subprocess.Popen([*command, "--process-id", str(i), "--runs-dir", str(tmp_path / f"host{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 0)]
    (out1, err1), (out0, err0) = (host.communicate(timeout=300) for host in hosts)
    assert [host.returncode for host in hosts] == [0, 0], err0[-2000:] + err1[-2000:]
    assert out1.startswith("process 1 of 2 trained its ranks") and not any((tmp_path / "host1").iterdir())
    two = json.loads(next((tmp_path / "host0").glob("*/report.json")).read_text())
    assert two["passed"] and "4 devices in 2 processes (2 each)" in two["verdict"], two["verdict"]
    four = run_experiment(load_config("lenet_digits", [*overrides, "parallel.processes=4"]), max_steps=30,
                          write=False, progress=False, only="jax")
    one = run_experiment(load_config("lenet_digits", overrides), max_steps=30, write=False, progress=False,
                         only="jax")
    assert [s["jax_loss"] for s in two["steps"]] == [s["jax_loss"] for s in four.steps] == \
           [s["jax_loss"] for s in one.steps]
    assert two["epochs"][-1]["jax_accuracy"] == four.epochs[-1].jax_accuracy == one.epochs[-1].jax_accuracy


def _straight_then_resumed(tmp_path, overrides):
    """``(straight, first, resumed)``: lenet_digits_ddp with ``overrides`` for two epochs, for one epoch
    into ``tmp_path``, and that one resumed from its checkpoint to two."""
    def run(epochs, **kwargs):
        return run_experiment(load_config("lenet_digits_ddp", [*overrides, f"train.epochs={epochs}"]),
                              progress=False, **kwargs)

    straight, first = run(2, write=False), run(1, runs_dir=tmp_path)
    return straight, first, run(2, runs_dir=tmp_path, resume=f"{first.run_dir}/checkpoint.pt")


@pytest.mark.slow  # ~70 s: a straight data-parallel run of 3 epochs, one stopped in JAX's third, its resume
def test_a_data_parallel_run_stopped_mid_way_keeps_its_whole_epochs_and_resumes(tmp_path, monkeypatch):
    """A user's net with BatchNorm and dropout 0.5 on 2 ranks (pmap), float32 beside its float64 twin,
    interrupted while JAX trains its third epoch (torch and its twin done): the report holds every step of
    the two epochs every side completed, checkpoint.pt resumes there, and the resumed run is the straight
    run, step for step (every torch, JAX and torch-float64 loss and lr: rank 0's and replica 0's model and
    optimizer state, torch's scheduler, the twin's state, the samplers' epoch, and every torch rank's and JAX
    replica's generator, so the masks and loader seeds after the resume are the ones the straight run
    drew), in the first run's folder, one report from step 0. Every parameter and BatchNorm running
    statistic is reported beside torch's own float32-vs-float64 distance."""
    import dataclasses

    overrides = [USER_MODEL.replace("width: 4", "width: 4, dropout: 0.5"), "data.batch_size=64",
                 "train.epochs=3", "scheduler={name: StepLR, step_size: 1, gamma: 0.5}"]
    straight = run_experiment(load_config("lenet_digits_ddp", overrides), write=False, progress=False)
    real_jax_run = parity.parallel.jax_run

    def stopped(spec, initial, **kwargs):  # JAX's run ends 5 steps into its third epoch, then Ctrl-C
        real_jax_run(dataclasses.replace(spec, steps=2 * 12 + 5), initial, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel, "jax_run", stopped)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False)
    folder = tmp_path / caught.value.parity_run_dir.split("/")[-1]
    data = json.loads((folder / "report.json").read_text())
    assert data["interrupted"] and "checkpoint.pt there" in data["message"]
    assert [s["step"] for s in data["steps"]] == list(range(24)) and [e["steps"] for e in data["epochs"]] == [12, 24]
    for key in ("torch_loss", "jax_loss", "torch_f64_loss", "lr"):
        assert [s[key] for s in data["steps"]] == [s[key] for s in straight.steps[:24]], key
    assert not (folder / ".partial").exists()
    assert parity.checkpoint.read_checkpoint(folder / "checkpoint.pt").step == 24
    monkeypatch.setattr(parity.parallel, "jax_run", real_jax_run)
    resumed = run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False,
                             resume=str(folder / "checkpoint.pt"))
    for key in ("torch_loss", "jax_loss", "torch_f64_loss", "lr"):
        assert [s[key] for s in resumed.steps] == [s[key] for s in straight.steps], key
    assert [e.steps for e in resumed.epochs] == [12, 24, 36] and resumed.passed, resumed.message
    assert resumed.epochs[-1].param_max_rel == straight.epochs[-1].param_max_rel
    assert resumed.run_dir == str(folder)
    leaves = resumed.epochs[-1].leaves
    assert {"bn.running_mean", "bn.running_var", "conv.weight"} <= set(leaves)
    assert all(floor > 0 for _, floor in leaves.values())  # torch's own float32 distance, per tensor
    with pytest.raises(parity.checkpoint.CheckpointError, match="nothing to do"):
        run_experiment(load_config("lenet_digits_ddp", overrides), runs_dir=tmp_path, progress=False,
                       resume=str(folder / "checkpoint.pt"))


@pytest.mark.slow  # ~15 s: JAX alone on 2 devices, stopped in its second epoch
def test_a_data_parallel_run_without_checkpoints_keeps_its_whole_epochs_when_stopped(tmp_path, monkeypatch):
    """``train.checkpoint: none``: an interrupted data-parallel run still keeps the report of its whole epochs
    (as a single-device run does), and writes no checkpoint."""
    import dataclasses

    real_jax_run = parity.parallel.jax_run

    def stopped(spec, initial, **kwargs):  # JAX's run ends 3 steps into its second epoch, then Ctrl-C
        real_jax_run(dataclasses.replace(spec, steps=12 + 3), initial, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel, "jax_run", stopped)
    cfg = load_config("lenet_digits_ddp", ["data.batch_size=64", "train.epochs=2", "train.checkpoint=none"])
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(cfg, runs_dir=tmp_path, progress=False, only="jax")
    folder = tmp_path / caught.value.parity_run_dir.split("/")[-1]
    data = json.loads((folder / "report.json").read_text())
    assert data["interrupted"] and "so no checkpoint.pt" in data["message"], data["message"]
    assert [s["step"] for s in data["steps"]] == list(range(12)) and [e["steps"] for e in data["epochs"]] == [12]
    assert not (folder / ".partial").exists() and not (folder / "checkpoint.pt").exists()


@pytest.mark.slow  # ~20 s: one data-parallel run of 2 epochs
def test_a_data_parallel_run_stopped_while_comparing_keeps_every_epoch(tmp_path, monkeypatch):
    """Ctrl-C after every side trained, while the runner compares them: the report and checkpoint.pt hold
    both epochs (from the staged records), and the staging folder is gone."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel_runner, "judge", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(load_config("lenet_digits_ddp", ["data.batch_size=64", "train.epochs=2"]), runs_dir=tmp_path,
                       progress=False)
    folder = tmp_path / caught.value.parity_run_dir.split("/")[-1]
    data = json.loads((folder / "report.json").read_text())
    assert data["interrupted"] and [e["steps"] for e in data["epochs"]] == [12, 24] and len(data["steps"]) == 24
    assert parity.checkpoint.read_checkpoint(folder / "checkpoint.pt").step == 24
    assert not (folder / ".partial").exists()


# pmap's replicas (one JAX process) resume their generators in the stopped-and-resumed run above.
@pytest.mark.slow  # ~50 s: three data-parallel runs of a user net with dropout, 2 ranks, 2 JAX processes
@pytest.mark.parametrize("layout", [["parallel.jax_mode=sharded", "parallel.processes=2"]])
def test_a_data_parallel_run_with_dropout_resumes_on_its_trajectory(tmp_path, layout):
    """Dropout 0.5 on 2 ranks, float64: one epoch, then --resume to two equals the straight two-epoch run,
    every loss: the checkpoint holds every torch rank's global generator and every JAX replica's (gathered
    from the JAX processes), so the second epoch draws the masks and loader seeds it would have drawn."""
    model = USER_MODEL.replace("width: 4", "width: 4, dropout: 0.5")
    overrides = [model, "train.dtype=float64", "data.batch_size=32", *layout,
                 "train.tolerance={rtol: 1.0e-10, atol: 1.0e-12}"]
    straight, _, resumed = _straight_then_resumed(tmp_path, overrides)
    for key in ("torch_loss", "jax_loss"):
        assert [s[key] for s in resumed.steps] == [s[key] for s in straight.steps], key
    assert resumed.passed and [e.steps for e in resumed.epochs] == [23, 46], resumed.message
    assert resumed.epochs[-1].param_max_rel == straight.epochs[-1].param_max_rel <= 1e-10
