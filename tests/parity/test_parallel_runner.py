"""The data-parallel run's folder when a run stops."""

from __future__ import annotations

import json

import pytest

import parity.parallel
from parity.config import load_config
from parity.experiment import run_experiment


def test_an_interrupted_data_parallel_run_leaves_a_report(tmp_path, monkeypatch):
    """SIGINT while the ranks train: the run folder holds a report marked interrupted, not nothing."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parity.parallel, "torch_reference", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_experiment(load_config("lenet_digits_ddp", ["train.epochs=1"]), runs_dir=tmp_path, progress=False)
    data = json.loads((tmp_path / caught.value.parity_run_dir.split("/")[-1] / "report.json").read_text())
    assert data["interrupted"] and not data["passed"] and data["verdict"].startswith("INTERRUPTED after 0")
