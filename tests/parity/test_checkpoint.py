"""Checkpoints and --resume under faults: no code runs from a file, damage and config changes are refused,
history is kept, a full disk loses nothing. Each fault goes through the CLI and must give its exit code and
one line on stderr, never a traceback."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parity.files
from parity.checkpoint import CheckpointError, config_changes, read_checkpoint
from parity.cli import main
from parity.config import load_config
from parity.experiment import run_experiment

SHORT = ["train.epochs=1", "data.batch_size=256"]  # 6 steps an epoch: a checkpoint in seconds


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A one-epoch run with its checkpoint (the run folder is shared: tests copy the checkpoint)."""
    report = run_experiment(load_config("configs/lenet_digits.yaml", SHORT), runs_dir=tmp_path_factory.mktemp("runs"),
                            progress=False)
    return report, Path(report.run_dir) / "checkpoint.pt"


def _copy(checkpoint: Path, folder: Path) -> Path:
    target = folder / "checkpoint.pt"
    target.write_bytes(checkpoint.read_bytes())
    return target


def _resume(tmp_path, checkpoint, *overrides, flags=()):
    return main(["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), "--resume", str(checkpoint),
                 *flags, "configs/lenet_digits.yaml", *SHORT[1:], "train.epochs=2", *overrides])


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class _Payload:
    """A pickle whose unpickling runs a command: what a crafted --resume file would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_crafted_pickle_does_not_run(tmp_path, capsys, how):
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pt"
    if how == "torch.save":
        torch.save({"format": "parity-checkpoint", "payload": _Payload(marker)}, evil)
    else:
        evil.write_bytes(pickle.dumps(_Payload(marker)))
    assert _resume(tmp_path, evil) == 2
    assert not marker.exists()
    assert "evil.pt" in _one_line(capsys.readouterr().err)


def test_byte_flipped_checkpoint_exits_2(tmp_path, capsys, finished):
    data = bytearray(_copy(finished[1], tmp_path).read_bytes())
    middle = len(data) // 2
    data[middle:middle + 2000] = bytes(b ^ 0xFF for b in data[middle:middle + 2000])
    (tmp_path / "checkpoint.pt").write_bytes(bytes(data))
    assert _resume(tmp_path, tmp_path / "checkpoint.pt") == 2
    assert "damaged" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, "truncated", "foreign", "list"])
def test_unreadable_or_foreign_checkpoints_exit_2(tmp_path, capsys, finished, content):
    path = tmp_path / "checkpoint.pt"
    if content == "truncated":
        path.write_bytes(finished[1].read_bytes()[:5000])
    elif content == "foreign":
        torch.save(torch.nn.Linear(2, 2).state_dict(), path)
    elif content == "list":
        torch.save([1, 2, 3], path)
    else:
        path.write_bytes(content)
    assert _resume(tmp_path, path) == 2
    assert str(path) in _one_line(capsys.readouterr().err)


@pytest.mark.slow  # ~5 s: two resumed runs (the default tier keeps the refusals of unreadable checkpoints)
def test_changed_hyperparameter_is_refused_unless_allowed(tmp_path, capsys, finished):
    checkpoint = _copy(finished[1], tmp_path)
    assert _resume(tmp_path, checkpoint, "optimizer.lr=0.001") == 2
    line = _one_line(capsys.readouterr().err)
    assert "optimizer.lr: 0.005 in the checkpoint, 0.001 now" in line and "--allow-config-change" in line
    # Allowed: both frameworks take the new lr (torch's param groups are rewritten), so parity holds.
    assert _resume(tmp_path, checkpoint, "optimizer.lr=0.001", flags=["--allow-config-change"]) == 0
    report = json.loads(next((tmp_path / "runs").glob("*/report.json")).read_text())
    assert report["passed"] and [s["lr"] for s in report["steps"]][-1] == 0.001 * 0.3 ** 0


def test_free_keys_may_change():
    old = load_config("configs/lenet_digits.yaml").to_dict()
    new = load_config("configs/lenet_digits.yaml", ["train.epochs=9", "train.tolerance.rtol=0.1", "name=x"]).to_dict()
    assert config_changes(old, new) == []
    changed = load_config("configs/lenet_digits.yaml", ["train.seed=1"]).to_dict()
    assert [key for key, _, _ in config_changes(old, changed)] == ["train.seed"]


def test_finished_run_has_nothing_to_do(tmp_path, capsys, finished):
    checkpoint = _copy(finished[1], tmp_path)
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), "--resume", str(checkpoint),
                 "configs/lenet_digits.yaml", *SHORT]) == 2
    assert "nothing to do" in _one_line(capsys.readouterr().err)


def test_resume_continues_the_run_folder(tmp_path, finished):
    """A checkpoint beside its report resumes in that folder: one report from step 0, the checkpoint advanced."""
    report, checkpoint = finished
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("checkpoint.pt", "report.json"):
        (folder / name).write_bytes((checkpoint.parent / name).read_bytes())
    resumed = run_experiment(load_config("configs/lenet_digits.yaml", [*SHORT[1:], "train.epochs=2"]),
                             runs_dir=tmp_path / "runs", progress=False, resume=folder / "checkpoint.pt")
    assert resumed.run_dir == str(folder) and not (tmp_path / "runs").exists()
    data = json.loads((folder / "report.json").read_text())
    assert [s["step"] for s in data["steps"]] == list(range(12)) and len(data["epochs"]) == 2
    assert data["steps"][:6] == json.loads(json.dumps(report.steps))
    assert read_checkpoint(folder / "checkpoint.pt").step == 12


@pytest.mark.slow  # ~6 s: a run whose second checkpoint write fails
def test_disk_full_keeps_the_previous_checkpoint(tmp_path, capsys, monkeypatch):
    """ENOSPC on the second checkpoint: exit 2 naming the path, no temporary file, the first checkpoint intact."""
    real = parity.files.os.fsync
    calls = {"checkpoint": 0}

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".checkpoint.pt"):
            calls["checkpoint"] += 1
            if calls["checkpoint"] == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(parity.files.os, "fsync", fsync)
    runs = tmp_path / "runs"
    assert main(["run", "--no-progress", "--runs-dir", str(runs), "configs/lenet_digits.yaml", *SHORT[1:],
                 "train.epochs=2"]) == 2
    line = _one_line(capsys.readouterr().err)
    folder = next(runs.iterdir())
    assert line == f"parity: error: no space left on device: {folder / 'checkpoint.pt'}"
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt", "divergence.png", "loss.png", "recording-jax",
                                                        "recording-torch", "recording-torch-float64", "report.json",
                                                        "report.md"]
    assert read_checkpoint(folder / "checkpoint.pt").epoch == 1
    assert json.loads((folder / "report.json").read_text())["interrupted"]


def test_internal_error_exits_3_with_the_traceback_in_the_run_folder(tmp_path, capsys, monkeypatch):
    import parity.runner

    def broken(*args, **kwargs):
        raise RuntimeError("an internal fault")

    monkeypatch.setattr(parity.runner, "_measure", broken)
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path), "configs/lenet_digits.yaml", *SHORT]) == 3
    line = _one_line(capsys.readouterr().err)
    folder = next(tmp_path.iterdir())
    assert line.startswith("parity: internal error: RuntimeError: an internal fault") and "error.log" in line
    assert "Traceback" in (folder / "error.log").read_text()
    assert json.loads((folder / "report.json").read_text())["interrupted"]


@pytest.mark.slow  # ~10 s: 60 examples
@settings(max_examples=60, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_checkpoints_raise_checkpoint_error_only(tmp_path, finished, data):
    """Random bytes, truncations and byte flips of a real checkpoint: CheckpointError (exit 2) or a clean read."""
    original = finished[1].read_bytes()
    kind = data.draw(st.sampled_from(["random", "truncate", "flip"]))
    if kind == "random":
        blob = data.draw(st.binary(max_size=4096))
    elif kind == "truncate":
        blob = original[: data.draw(st.integers(0, len(original) - 1))]
    else:
        blob = bytearray(original)
        for index in data.draw(st.lists(st.integers(0, len(original) - 1), min_size=1, max_size=20)):
            blob[index] ^= data.draw(st.integers(1, 255))
        blob = bytes(blob)
    path = tmp_path / "fuzz.pt"
    path.write_bytes(blob)
    try:
        read_checkpoint(path)
    except CheckpointError:
        pass


def test_strict_json_and_a_verdict_with_its_numbers(finished):
    report, checkpoint = finished
    text = (checkpoint.parent / "report.json").read_text()
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    # Within rtol on AVX-512 CPUs; on AVX2 the float32 kernels of both sides round otherwise and a run can pass
    # by torch's float32 floor instead (tests/_cpu.py). Either verdict carries its numbers.
    assert re.match(r"PASSED(: parameters within rtol 0\.0001 \(max rel | by torch's float32 floor: parameters max "
                    r"rel [0-9.e-]+ at )", data["verdict"]), data["verdict"]
    assert data["epochs"][0]["torch_accuracy"] is not None
    first = (checkpoint.parent / "report.md").read_text().splitlines()[0]
    assert first == f"**{report.verdict()}**"


@pytest.mark.slow  # three short runs; every other checkpoint test runs the default `every`
def test_checkpoint_option_and_whole_epochs_only(tmp_path):
    """`none` writes none, `last` one at the end; a run stopped inside an epoch (--steps) writes none, since the
    loaders cannot resume in the middle of an epoch."""
    for mode, steps, expected in (("none", None, False), ("last", None, True), ("every", 3, False)):
        report = run_experiment(load_config("configs/lenet_digits.yaml", [*SHORT, f"train.checkpoint={mode}"]),
                                runs_dir=tmp_path / mode, progress=False, max_steps=steps)
        assert (Path(report.run_dir) / "checkpoint.pt").exists() == expected


def test_checkpoint_is_a_digest_then_a_torch_file_loadable_without_code(finished):
    header, digest, body = finished[1].read_bytes().split(b"\n", 2)
    assert header == b"PARITY-CHECKPOINT" and digest == hashlib.sha256(body).hexdigest().encode()
    state = torch.load(io.BytesIO(body), weights_only=True)
    assert state["step"] == 6 and state["config"]["name"] == "lenet-digits"
    assert set(state["torch"]) == {"model", "optimizer", "scheduler", "generator", "rng"}


@pytest.mark.parametrize("region", ["header", "digest", "body start", "body end"])
def test_a_flip_anywhere_is_refused_before_unpickling(tmp_path, capsys, finished, region):
    data = bytearray(finished[1].read_bytes())
    index = {"header": 3, "digest": 30, "body start": 90, "body end": len(data) - 1}[region]
    data[index] ^= 0x01
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(bytes(data))
    assert _resume(tmp_path, path) == 2
    assert "damaged" in _one_line(capsys.readouterr().err)


@pytest.mark.slow  # two short runs
def test_a_one_framework_checkpoint_resumes_as_such(tmp_path, capsys):
    jax_only = run_experiment(load_config("configs/lenet_digits.yaml", SHORT), runs_dir=tmp_path / "a", only="jax",
                              progress=False)
    checkpoint = _copy(Path(jax_only.run_dir) / "checkpoint.pt", tmp_path)
    assert _resume(tmp_path, checkpoint) == 2
    assert "trained jax only: resume with --only jax" in _one_line(capsys.readouterr().err)
    assert _resume(tmp_path, checkpoint, flags=["--resume-from", "jax"]) == 0


@pytest.mark.slow  # ~5 s: a 6-step resumed run
def test_resume_without_a_config_uses_the_checkpoints(tmp_path, capsys, finished):
    """``parity run --resume CKPT train.epochs=2``: no config file retyped; the recorded config, overridden.
    A worker count is a free key: the same batches either way."""
    checkpoint = _copy(finished[1], tmp_path)
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), "--resume", str(checkpoint),
                 "train.epochs=2", "data.num_workers=1"]) == 0
    assert "after 12 steps" in capsys.readouterr().out
    # torch's float64 twin restarts from the checkpoint's float32 state: the distance torch's own run had
    # reached is carried into the floor of every later epoch (parity.floor.FloorReference)
    first, second = json.loads(next((tmp_path / "runs").glob("*/report.json")).read_text())["epochs"]
    assert all(second["leaves"][k][1] >= floor for k, (_, floor) in first["leaves"].items())
    assert main(["run", "--no-progress", "--runs-dir", str(tmp_path / "runs"), "--resume", str(checkpoint),
                 "optimizer.lrr=1"]) == 2
    assert f"the config recorded in {checkpoint}: " in _one_line(capsys.readouterr().err)
