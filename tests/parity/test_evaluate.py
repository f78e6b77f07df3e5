"""parity.evaluate: the held-out predictions both runners report, against torch's own model in eval mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
from parity.convert import load_torch_state_dict
from parity.evaluate import jax_predictions, torch_predictions


def _pair(seed: int) -> tuple[torch.nn.Module, nnx.Module]:
    torch.manual_seed(seed)
    t = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                            torch.nn.Linear(16, 5))
    # Running statistics away from their initial values, so that eval mode is visible in the predictions.
    t.train()
    with torch.no_grad():
        t(torch.randn(64, 6, dtype=torch.float32) * 3 + 1)
    j = nn.Sequential(nn.Linear(6, 16, rngs=nnx.Rngs(0)), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5),
                      nn.Linear(16, 5, rngs=nnx.Rngs(1)))
    load_torch_state_dict(j, t.state_dict())
    return t, j


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_sides_predict_as_torchs_model_in_eval_mode(seed):
    """Each side's prediction is ``model.eval()(x).argmax(1)`` (running statistics, no dropout), batch by batch,
    whatever mode the model was left in; an integer label array is what comes back."""
    t, j = _pair(seed)
    x = np.random.default_rng(seed).standard_normal((37, 6)).astype(np.float32)
    t.train()
    j.train()
    expected = t.eval()(torch.from_numpy(x)).argmax(1).numpy()
    t.train()
    batches = [x[:16], x[16:32], x[32:]]
    got_t = torch_predictions(t, batches, torch.float32)
    got_j = jax_predictions(j, batches, np.float32)
    np.testing.assert_array_equal(got_t, expected)
    # The logits of the two sides agree to float32 rounding; the class is the same unless two logits tie within
    # it, which these draws do not.
    np.testing.assert_array_equal(got_j, expected)
    assert not t.training  # torch's model is left in eval mode, as torch's own evaluation loops leave it


def test_float64_and_autocast_and_no_batches():
    t, j = _pair(3)
    x = np.random.default_rng(3).standard_normal((20, 6))
    t64 = t.double()
    expected = t64.eval()(torch.from_numpy(x)).argmax(1).numpy()
    j64 = nn.Sequential(nn.Linear(6, 16, rngs=nnx.Rngs(0), dtype=np.float64), nn.BatchNorm1d(16, dtype=np.float64),
                        nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 5, rngs=nnx.Rngs(1), dtype=np.float64))
    load_torch_state_dict(j64, t64.state_dict())
    np.testing.assert_array_equal(torch_predictions(t64, [x], torch.float64), expected)
    np.testing.assert_array_equal(jax_predictions(j64, [x], np.float64), expected)
    # bfloat16 autocast runs both sides' forwards in bfloat16: most classes survive the rounding.
    t32, j32 = _pair(3)
    xb = x.astype(np.float32)
    agree = (torch_predictions(t32, [xb], torch.float32, "bfloat16") == jax_predictions(j32, [xb], np.float32,
                                                                                         "bfloat16")).mean()
    assert agree >= 0.9
    assert torch_predictions(t32, [], torch.float32).shape == (0,)
    assert jax_predictions(j32, [], np.float32).shape == (0,)
