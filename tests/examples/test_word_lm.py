"""examples/loops/word_lm.py: the word-level LSTM language model, torch's loop against the JAX loop.

Both sides draw everything from torch's stream (initial weights, three dropout masks per forward) and run
the example's recipe: truncated BPTT with detached hidden states, ``clip_grad_norm_(0.25)``, SGD by hand at
lr 20, lr / 4 when the validation loss stalls (it does twice in 50 steps).
"""

from __future__ import annotations

import pytest

import parity

from examples.loops import word_lm
from parity.floor import FLOOR_FACTOR
from tests.examples.floor_verdict import floor_ratios
from tests.examples.histories import worst
from tests.examples.torch_threads import one_thread


def _torch(**kwargs):
    with one_thread():
        return word_lm.train_torch(**kwargs)


def test_three_steps_float64_match_torch():
    """Smoke: three steps (one compiled step shape), every scalar and state within 1e-12 of torch's."""
    name, value = worst(word_lm.train_jax(steps=3, record_every=2), _torch(steps=3, record_every=2))
    assert value <= 1e-12, (name, value)


@pytest.mark.slow
def test_fifty_steps_float64_match_torch():
    """50 steps (5 passes over the text, two lr annealings): losses, gradient norms, validation losses and
    the model's state every 10 steps within 1e-10 of torch's relative to their scale (measured 4.1e-15)."""
    torch_run = _torch(steps=50)
    assert [h["lr"] for h in torch_run].count(20.0) < 50  # the annealing is exercised
    name, value = worst(word_lm.train_jax(steps=50), torch_run)
    assert value <= 1e-10, (name, value)


@pytest.mark.slow
def test_fifty_steps_float32_within_torchs_floor():
    """float32: every recorded value within FLOOR_FACTOR times torch's own float32 distance from its float64 run
    (the same initial draws, float32 values cast, and the same masks), grouped as parity.compare_runs groups
    them (a step's tensors against their worst floor, scalars against the worst scalar floor so far).
    Measured: largest ratio 3.5 (the gradient norm at step 3), the states at most 1.2."""
    torch32 = _torch(steps=50, dtype="float32")
    torch64 = _torch(steps=50, dtype="float64")
    ratios = floor_ratios(word_lm.train_jax(steps=50, dtype="float32"), torch32, torch64)
    over = {key: ratio for key, ratio in ratios.items() if ratio > FLOOR_FACTOR}
    assert not over, over


@pytest.mark.slow
def test_command_line_records_both_sides_and_compare_runs_passes(tmp_path):
    """``python -m examples.loops.word_lm`` on each side, then ``parity.compare_runs`` on the two folders: the model's state and the per-step scalars."""
    with one_thread():
        word_lm.main(["--framework", "torch", "--out", str(tmp_path / "torch"), "--steps", "2"])
    word_lm.main(["--framework", "jax", "--out", str(tmp_path / "jax"), "--steps", "2"])
    report = parity.compare_runs(tmp_path / "torch", tmp_path / "jax")
    assert report.passed, report
    assert {"model.rnn.weight_hh_l1", "model.decoder.weight"} <= set(report.recordings["last"])
