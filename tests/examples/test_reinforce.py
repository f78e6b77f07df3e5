"""examples/loops/reinforce.py: REINFORCE on CartPole dynamics, torch's loop against the JAX loop.

Both sides draw the policy's initial weights, every dropout mask and every sampled action from torch's
stream, in torch's order; the environment's starting states come from its own NumPy generator. The runs
take the same actions, so their episodes have the same lengths, and the losses and weights agree to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

import parity

from examples.loops import reinforce
from parity.floor import FLOOR_FACTOR
from tests.examples.floor_verdict import floor_ratios
from tests.examples.histories import worst
from tests.examples.torch_threads import one_thread


def _torch(**kwargs):
    with one_thread():
        return reinforce.train_torch(**kwargs)


def test_cartpole_follows_gyms_equations():
    """One push from a known state, against gym's CartPole-v1 Euler step written out here."""
    env = reinforce.CartPole(0)
    env.state = np.array([0.01, -0.02, 0.03, 0.04])
    state, reward, terminated, truncated = env.step(1)
    x, x_dot, theta, theta_dot = 0.01, -0.02, 0.03, 0.04
    temp = (10.0 + 0.05 * theta_dot**2 * np.sin(theta)) / 1.1
    thetaacc = (9.8 * np.sin(theta) - np.cos(theta) * temp) / (0.5 * (4.0 / 3.0 - 0.1 * np.cos(theta) ** 2 / 1.1))
    xacc = temp - 0.05 * thetaacc * np.cos(theta) / 1.1
    expected = [x + 0.02 * x_dot, x_dot + 0.02 * xacc, theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc]
    np.testing.assert_allclose(state, expected, rtol=1e-15)
    assert (reward, terminated, truncated) == (1.0, False, False)


def test_two_episodes_float64_match_torch():
    """Smoke: two episodes, every scalar and the policy's weights within 1e-12 of torch's."""
    torch_run = _torch(steps=2, record_every=1)
    name, value = worst(reinforce.train_jax(steps=2, record_every=1), torch_run)
    assert value <= 1e-12, (name, value)


@pytest.mark.slow
def test_fifty_episodes_float64_match_torch():
    """50 episodes (Adam steps; the episodes grow from ~20 to ~140 steps): the same episode rewards, losses
    and the policy every 10 episodes within 1e-10 of torch's relative to their scale (measured: weights
    5.8e-16, the loss 7.3e-14: a sum of terms of both signs, relative to its smaller value)."""
    torch_run = _torch(steps=50)
    ours = reinforce.train_jax(steps=50)
    assert [h["ep_reward"] for h in ours] == [h["ep_reward"] for h in torch_run]
    name, value = worst(ours, torch_run)
    assert value <= 1e-10, (name, value)


@pytest.mark.slow
def test_fifty_episodes_float32_within_torchs_floor():
    """float32: every recorded value within FLOOR_FACTOR times torch's own float32 distance from its float64 run,
    grouped as parity.compare_runs groups them (a step's tensors against their worst floor, scalars against
    the worst scalar floor so far). Measured: largest ratio 2.8 (the first episode's loss); the same episode
    lengths."""
    torch32 = _torch(steps=50, dtype="float32")
    torch64 = _torch(steps=50, dtype="float64")
    ratios = floor_ratios(reinforce.train_jax(steps=50, dtype="float32"), torch32, torch64)
    over = {key: ratio for key, ratio in ratios.items() if ratio > FLOOR_FACTOR}
    assert not over, over


@pytest.mark.slow
def test_command_line_records_both_sides_and_compare_runs_passes(tmp_path):
    """``python -m examples.loops.reinforce`` on each side, then ``parity.compare_runs`` on the two folders: the policy, its Adam's state under torch's names, the scalars."""
    with one_thread():
        reinforce.main(["--framework", "torch", "--out", str(tmp_path / "torch"), "--steps", "2"])
    reinforce.main(["--framework", "jax", "--out", str(tmp_path / "jax"), "--steps", "2"])
    report = parity.compare_runs(tmp_path / "torch", tmp_path / "jax")
    assert report.passed, report
    assert {"policy.affine1.weight", "optimizer.state.3.exp_avg_sq"} <= set(report.recordings["last"])
