"""parity.staging: each side's whole epochs of a data-parallel run on disk, read back up to the last epoch
every side completed; nothing read from a damaged file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parity import staging


def _write(folder, side, step, losses):
    state = {"model": {"w": torch.full((2,), float(step))}, "optimizer": {"state": {}, "param_groups": []}}
    staging.write_epoch(folder, side, step, step // 3, losses, {3: 1.0, step: 2.0}, state)


def test_the_records_stop_at_the_last_epoch_every_side_completed(tmp_path):
    for step in (3, 6, 9):
        _write(tmp_path, "torch", step, [float(i) for i in range(step)])
    for step in (3, 6):
        _write(tmp_path, "jax", step, [float(-i) for i in range(step)])
    runs, last = staging.read_staged(tmp_path, ["torch", "jax"])
    assert last == 6
    assert runs["torch"]["losses"] == [float(i) for i in range(6)] and runs["jax"]["losses"][-1] == -5.0
    assert sorted(runs["torch"]["snapshots"]) == [3, 6]
    np.testing.assert_array_equal(runs["jax"]["snapshots"][3]["w"], [3.0, 3.0])
    resume = runs["torch"]["resume_state"]
    assert (resume["step"], resume["epoch"]) == (6, 2) and set(resume) == {"step", "epoch", "model", "optimizer"}
    assert staging.read_staged(tmp_path, ["torch", "floor", "jax"]) is None  # the float64 twin never ran


def test_a_damaged_file_keeps_nothing_and_clear_removes_the_folder(tmp_path):
    _write(tmp_path, "torch", 3, [1.0, 2.0, 3.0])
    (tmp_path / "torch-3.pt").write_bytes(b"not a torch file")
    assert staging.read_staged(tmp_path, ["torch"]) is None
    assert staging.read_staged(tmp_path / "absent", ["torch"]) is None
    staging.clear(tmp_path)
    assert not tmp_path.exists()
    with pytest.raises(ValueError, match="unknown side"):
        _write(tmp_path, "numpy", 3, [])
