"""parity run records each side it trains (parity.run_recording): a torch-only run and a JAX-only run, compared
with parity compare, give the verdict and the numbers the joint run gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity.cli import main
from parity.compare_recordings import compare_runs
from parity.recording import RecordingError, read_recording
from parity.run_recording import FLOOR, JAX, TORCH

# rtol 1e-7: below float32's spread after a few Adam steps, so both verdicts fall back on torch's own float32
# floor (the float64 twin each float32 torch side trains). No held-out split and no checkpoint: the runs' time
# is training and the JAX step's compile (read back from the compilation cache by the JAX-only run).
TIGHT = ["train.tolerance.rtol=1e-7", "data.val_fraction=0", "train.checkpoint=none"]
STEPS = 4


def _run(tmp_path: Path, where: str, only: str | None, overrides: list[str], steps: int | None) -> Path:
    """``parity run lenet_digits [--only SIDE] --steps N --runs-dir tmp/where``: the run folder. From the command
    line, as the two-machine workflow runs it (the second compile of the JAX step is read from the cache)."""
    args = ["run", "lenet_digits", *overrides, "--runs-dir", str(tmp_path / where), "--no-progress"]
    args += (["--only", only] if only else []) + (["--steps", str(steps)] if steps else [])
    assert main(args) == 0
    folder, = (tmp_path / where).iterdir()
    return folder


def _report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return {side: _run(tmp, side, only, TIGHT, STEPS) for side, only in (("joint", None), ("torch", "torch"),
                                                                         ("jax", "jax"))}


def test_each_side_records_in_its_run_folder(runs):
    assert sorted(p.name for p in runs["torch"].glob("recording-*")) == sorted([TORCH, FLOOR])
    assert sorted(p.name for p in runs["jax"].glob("recording-*")) == [JAX]
    assert sorted(p.name for p in runs["joint"].glob("recording-*")) == sorted([TORCH, JAX, FLOOR])
    torch_rec, jax_rec = read_recording(runs["torch"] / TORCH), read_recording(runs["jax"] / JAX)
    floor_rec = read_recording(runs["torch"] / FLOOR)
    assert (torch_rec.framework, torch_rec.dtype, floor_rec.dtype, jax_rec.framework) == (
        "torch", "float32", "float64", "jax")
    assert torch_rec.complete and jax_rec.complete and floor_rec.complete
    assert torch_rec.steps == jax_rec.steps == list(range(STEPS))
    assert torch_rec.tensor_steps == jax_rec.tensor_steps == [STEPS - 1]  # the (cut) epoch's last step
    # The same names on both sides: torch's state_dict keys, the JAX model's converted to them.
    assert set(torch_rec.names) == set(jax_rec.names) == set(floor_rec.names)
    assert {"loss", "lr", "model.conv1.weight", "model.fc3.bias"} <= set(torch_rec.names)
    joint_steps = _report(runs["joint"])["steps"]
    # The torch-only run's report shows the floor its recordings will be judged by: the joint run's.
    assert _report(runs["torch"])["epochs"][-1]["floor_max_rel"] == _report(runs["joint"])["epochs"][-1][
        "floor_max_rel"]
    for step in range(STEPS):
        assert torch_rec.scalars[step]["loss"] == joint_steps[step]["torch_loss"]
        assert jax_rec.scalars[step]["loss"] == joint_steps[step]["jax_loss"]
        assert floor_rec.scalars[step]["loss"] == joint_steps[step]["torch_f64_loss"]
        assert torch_rec.scalars[step]["lr"] == joint_steps[step]["lr"] == 0.005


def test_two_one_sided_runs_judge_as_the_joint_run(runs):
    """The torch-only and JAX-only runs train exactly what the joint run trains: the final parameters' distance
    is the joint run's param_max_rel to the bit, and the floor the same. Measured (4 steps, float32): 4.0e-6
    (fc1.weight) against torch's own float32-vs-float64 3.1e-5, so both pass by the floor at rtol 1e-7."""
    joint = _report(runs["joint"])
    last = joint["epochs"][-1]
    assert joint["passed"] and joint["passed_by"] == "floor", joint["message"]
    report = compare_runs(runs["torch"], runs["jax"])  # run folders: A's torch, B's jax, A's float64 twin
    assert report.passed and report.passed_by == "floor", report.message
    assert report.config["train"]["tolerance"]["rtol"] == 1e-7  # the run's config, recorded
    assert report.recordings["floor"]["folder"] == str(runs["torch"] / FLOOR)
    epoch = report.epochs[-1]
    params = [n for n, m in report.recordings["last"].items() if m["kind"] == "tensor"]
    assert epoch.param_max_rel == last["param_max_rel"]
    assert max(epoch.leaves[n][0] for n in params) == last["param_max_rel"]
    assert epoch.floor_max_rel == last["floor_max_rel"]
    assert {n.removeprefix("model."): v for n, v in epoch.leaves.items()} == last["leaves"]
    # The joint run's own recordings judge the same.
    same = compare_runs(runs["joint"], runs["joint"])
    assert (same.passed_by, same.epochs[-1].param_max_rel) == ("floor", last["param_max_rel"])


def test_the_cli_compares_run_folders_and_recordings(runs, tmp_path, capsys):
    a, b = runs["torch"], runs["jax"]
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out.startswith("**PASSED by torch's float32 floor")
    data = json.loads((tmp_path / "runs" / "report.json").read_text())
    assert data["recordings"]["a"]["folder"] == str(a / TORCH) and data["recordings"]["b"]["folder"] == str(b / JAX)
    # The recordings themselves, the floor named: the same verdict.
    assert main(["compare", str(a / TORCH), str(b / JAX), "--floor", str(a / FLOOR), "--rtol", "1e-7",
                 "--out", str(tmp_path / "recs")]) == 0
    assert capsys.readouterr().out.startswith("**PASSED by torch's float32 floor")
    # Without the floor, rtol 1e-7 parts them: the floor is what the verdict rests on.
    assert main(["compare", str(a / TORCH), str(b / JAX), "--rtol", "1e-7", "--out", str(tmp_path / "strict")]) == 1
    capsys.readouterr()
    # B's folder has no torch recording: as RUN_A it is refused with the folders it holds.
    assert main(["compare", str(b), str(a), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "RUN_A: the run folder" in err and f"has no {TORCH}/ (it holds {JAX})" in err


def test_a_missing_side_is_a_recording_error(runs):
    with pytest.raises(RecordingError, match=f"RUN_B: the run folder .* has no {JAX}/"):
        compare_runs(runs["torch"], runs["torch"])


@pytest.mark.slow  # three runs of 25 steps, float32 with the float64 twin: about 15 s
def test_a_chaotic_float32_pair_passes_by_the_floor_as_the_joint_run(tmp_path):
    """test_floor's LeNet/Adam on batches of 64 at lr 0.02, into the second epoch (25 steps) at the config's
    rtol 1e-4. Measured: the joint run and the two one-sided runs both end at 6.8e-4 (fc2.weight), torch's floor
    8.9e-4: passed by the floor, largest ratio 1.4; the recordings compare at the first epoch's end and at the
    cut (steps 22 and 24)."""
    overrides = ["data.batch_size=64", "train.epochs=2", "optimizer.lr=0.02"]
    joint = _report(_run(tmp_path, "joint", None, overrides, 25))
    report = compare_runs(_run(tmp_path, "A", "torch", overrides, 25), _run(tmp_path, "B", "jax", overrides, 25))
    assert joint["passed_by"] == report.passed_by == "floor", (joint["message"], report.message)
    assert report.recordings["tensor_steps_compared"] == [22, 24]
    assert [e.param_max_rel for e in report.epochs] == [e["param_max_rel"] for e in joint["epochs"]]
    assert [e.floor_max_rel for e in report.epochs] == [e["floor_max_rel"] for e in joint["epochs"]]
