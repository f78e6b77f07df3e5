"""TransformerEncoderLayer in training mode with dropout, batch-first: torch's masks in torch's memory order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn
from jax_impl import random as jax_random
from parity.build import cast_jax_model
from parity.convert import load_torch_state_dict


@pytest.mark.slow  # ~3 s: eager dropout draws; the recipes' float64 runs check the same in the runner
@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder_layer_dropout_masks_match_torch(batch_first):
    """torch's batch-first attention output is an (L, N, E) tensor viewed as (N, L, E), and dropout1 draws
    its mask in that memory order; both layouts agree with torch to float64 rounding (measured 1.3e-15)."""
    kwargs = {"d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.2, "batch_first": batch_first,
              "norm_first": True}
    with jax.enable_x64(True):
        torch.manual_seed(0)
        ref = torch.nn.TransformerEncoderLayer(**kwargs).double().train()
        ours = jnn.TransformerEncoderLayer(**kwargs)
        cast_jax_model(ours, np.float64)
        load_torch_state_dict(ours, ref.state_dict())
        x = np.random.default_rng(0).standard_normal((3, 5, 16))
        torch.manual_seed(7)
        jax_random.set_rng_state(torch.get_rng_state().numpy())
        want = ref(torch.from_numpy(x)).detach().numpy()
        got = np.asarray(ours(jnp.asarray(x)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
