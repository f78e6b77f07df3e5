"""Ctrl-C and SIGTERM during `parity run`: exit 130, a report of every step done marked interrupted, the last
complete checkpoint kept, and one line on stderr instead of a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def _parity_run(tmp_path, *args, **popen):
    """``parity run --runs-dir tmp_path *args`` in a subprocess, its phase lines on a stderr pipe."""
    return subprocess.Popen([sys.executable, "-m", "parity", "run", "--runs-dir", str(tmp_path), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "80"}, **popen)


def _interrupted_report(process, err, tmp_path):
    """``(run folder, report)`` of a run that exited 130 with one line on stderr and an interrupted report."""
    assert process.returncode == 130, err
    assert "Traceback" not in err and "parity: interrupted; the report of the steps done is in" in err
    folder = next(tmp_path.iterdir())
    report = json.loads((folder / "report.json").read_text())
    assert report["interrupted"] and report["verdict"].startswith("INTERRUPTED after ")
    return folder, report


@pytest.mark.slow  # ~12 s each (the default tier's time budget)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_exits_130_with_the_report_so_far(tmp_path, signum):
    process = _parity_run(tmp_path, "configs/lenet_digits.yaml", "data.batch_size=64", "train.epochs=1000")
    try:
        deadline = time.monotonic() + 120
        for line in process.stderr:  # the phase lines: wait for training to start
            if "training" in line or time.monotonic() > deadline:
                break
        checkpoints = lambda: list(tmp_path.glob("*/checkpoint.pt"))  # noqa: E731
        while not checkpoints() and time.monotonic() < deadline:  # at least one epoch done
            time.sleep(0.2)
        time.sleep(0.5)
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    folder, report = _interrupted_report(process, err, tmp_path)
    done = len(report["steps"])
    assert done >= 23 and [s["step"] for s in report["steps"]] == list(range(done))
    assert read_checkpoint(folder / "checkpoint.pt").step == 23 * len(report["epochs"])


# torch and its float64 twin train every epoch before JAX starts: 2 epochs reach the twin's phase; stopped in
# JAX's, 10 epochs (no twin) leave 72 steps after JAX's 48th to be stopped in.
@pytest.mark.slow  # ~15 s each: a data-parallel `parity run` stopped in its torch twin's or its JAX phase
@pytest.mark.parametrize(("signum", "group", "phase", "options"), [
    # a scheduler's SIGTERM to the launcher alone
    (signal.SIGTERM, False, "in float64 beside it", ["train.epochs=2"]),
    # Ctrl-C: the whole process group, the ranks too
    (signal.SIGINT, True, "JAX pmap: step 48/", ["train.epochs=10", "train.floor=false"]),
])
def test_signal_mid_data_parallel_run_exits_130_with_its_whole_epochs(tmp_path, signum, group, phase, options):
    """The launcher stops at once (it only waits for its ranks), the ranks are ended, and the run folder
    keeps a report marked interrupted: every step to the last epoch every side completed and checkpoint.pt
    there, or, stopped before JAX's first epoch, a report that says there is nothing to resume; never the
    staging folder."""
    process = _parity_run(tmp_path, "configs/lenet_digits_ddp.yaml", "data.batch_size=64", *options,
                          start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        for line in process.stderr:  # the phase and progress lines
            if phase in line or time.monotonic() > deadline:
                break
        if group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    folder, report = _interrupted_report(process, err, tmp_path)
    assert not (folder / ".partial").exists()
    if group:
        epochs = [e["steps"] for e in report["epochs"]]
        assert len(epochs) >= 3 and epochs == [12 * (i + 1) for i in range(len(epochs))]  # 48 may be unwritten
        assert [s["step"] for s in report["steps"]] == list(range(epochs[-1]))
        assert read_checkpoint(folder / "checkpoint.pt").step == epochs[-1]
    else:
        assert report["steps"] == [] and "no checkpoint to resume from" in report["message"]
        assert not (folder / "checkpoint.pt").exists()
