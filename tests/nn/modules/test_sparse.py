"""Embedding against torch.nn.Embedding: lookup, weight gradient, padding_idx, scale_grad_by_freq, max_norm.

float64 and float32 lookups are copies (bit-identical); weight gradients are
sums of the same cotangents (measured <= 1e-15 float64); max_norm's rescaled
rows agree to ~1e-16 float64 (the norm's summation order).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as nn
from tests.nn.modules._torch_pair import load_state, rel_err


_SLOW = pytest.mark.slow  # the default tier's time budget: padding_idx and max_norm there, the rest here


@pytest.mark.parametrize("kwargs", [
    pytest.param(dict(), marks=_SLOW), dict(padding_idx=2), pytest.param(dict(padding_idx=-1), marks=_SLOW),
    pytest.param(dict(scale_grad_by_freq=True), marks=_SLOW), dict(padding_idx=0, scale_grad_by_freq=True),
    dict(max_norm=1.0), pytest.param(dict(max_norm=0.5, norm_type=1.0), marks=_SLOW),
])
def test_embedding_matches_torch(kwargs):
    with jax.enable_x64(True):
        torch.manual_seed(0)
        t_mod = torch.nn.Embedding(7, 4, dtype=torch.float64, **kwargs)
        j_mod = nn.Embedding(7, 4, dtype=jnp.float64, **kwargs)
        if "padding_idx" in kwargs:
            np.testing.assert_array_equal(np.asarray(j_mod.weight[...][kwargs["padding_idx"]]), 0)
        load_state(j_mod, t_mod)
        idx = np.array([[0, 2, 2, 6], [1, 0, 2, 3]])
        cot = np.random.default_rng(1).standard_normal((2, 4, 4))
        t_out = t_mod(torch.tensor(idx))
        (t_out * torch.tensor(cot)).sum().backward()

        def loss(weight):
            return jnp.sum(nn.functional.embedding(jnp.asarray(idx), weight, j_mod.padding_idx, j_mod.max_norm,
                                                   j_mod.norm_type, j_mod.scale_grad_by_freq) * cot)

        weight0 = j_mod.weight[...]
        out = j_mod(jnp.asarray(idx))
        assert rel_err(out, t_out.detach().numpy()) <= 1e-15
        # The module keeps the rescaled table, as torch's in-place renorm leaves it.
        assert rel_err(j_mod.weight[...], t_mod.weight.detach().numpy()) <= 1e-15
        assert rel_err(jax.grad(loss)(weight0), t_mod.weight.grad.numpy()) <= 1e-15


def test_embedding_from_pretrained_is_frozen():
    table = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    emb = nn.Embedding.from_pretrained(table)
    assert isinstance(emb.weight, nn.Buffer)
    np.testing.assert_array_equal(emb(jnp.asarray([3, 1])), table[[3, 1]])
