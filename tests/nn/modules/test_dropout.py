"""Dropout against torch.nn.Dropout: scaling rounded as torch rounds it, keep rate, eval identity, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
import jax_impl.nn.functional as F


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 1 / 3, 0.77, 0.9])
def test_kept_values_equal_torch_bit_for_bit(p, dtype):
    """torch's CPU dropout: noise.bernoulli_(1 - p).div_(1 - p); x * noise. With torch's mask, ours is identical."""
    with jax.enable_x64(dtype == np.float64):
        x = np.random.default_rng(0).standard_normal(20000).astype(dtype)
        torch.manual_seed(0)
        want = torch.nn.functional.dropout(torch.tensor(x), p, training=True).numpy()
        got = np.asarray(F.dropout(x, p, rng=jax.random.key(0)))
        kept_t, kept_j = want != 0, got != 0
        # Same scale on kept elements: x * (1 / float(1 - p)).
        np.testing.assert_array_equal(got[kept_j], (x * (dtype(1) / dtype(1 - p)))[kept_j])
        np.testing.assert_array_equal(want[kept_t], (x * (dtype(1) / dtype(1 - p)))[kept_t])
        # Keep rate: binomial, 5 sigma.
        n = x.size
        sigma = np.sqrt(n * p * (1 - p))
        assert abs(kept_j.sum() - n * (1 - p)) < 5 * sigma


def test_feature_dropout_zeroes_whole_channels():
    x = np.ones((4, 6, 3, 3), np.float32)
    y = np.asarray(F.dropout2d(x, 0.5, rng=jax.random.key(1)))
    per_channel = y.reshape(4, 6, -1)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))


def test_module_train_eval_and_edge_cases():
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    d = nn.Dropout(0.5, rngs=nnx.Rngs(0))
    a, b = np.asarray(d(x)), np.asarray(d(x))
    assert not np.array_equal(a, b)  # a fresh mask per call
    d.eval()
    np.testing.assert_array_equal(np.asarray(d(x)), x)
    d.train()
    np.testing.assert_array_equal(np.asarray(nn.Dropout(0.0)(x)), x)
    np.testing.assert_array_equal(np.asarray(nn.Dropout(1.0)(x)), torch.nn.Dropout(1.0)(torch.tensor(x)).numpy())
    # Under nnx.jit the rng stream advances too.
    step = nnx.jit(lambda m, x: m(x))
    assert not np.array_equal(np.asarray(step(d, x)), np.asarray(step(d, x)))


def test_default_rngs_follow_the_global_seed():
    from jax_impl.data import manual_seed

    x = jnp.ones((64,))
    manual_seed(3)
    a = np.asarray(nn.Dropout(0.5)(x))
    manual_seed(3)
    b = np.asarray(nn.Dropout(0.5)(x))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_bad_probability_raises_like_torch(p):
    with pytest.raises(ValueError) as theirs:
        torch.nn.Dropout(p)
    with pytest.raises(ValueError) as ours:
        nn.Dropout(p)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError) as ours:
        F.dropout(np.ones(3), p)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("order", [(1, 0, 2), (2, 0, 1)])
def test_mask_order_draws_a_transposed_views_mask(order):
    # torch fills a mask in its tensor's memory order (bernoulli_ on empty_like, strides kept): dropout of a
    # transposed view draws its numbers in the view's base order. mask_order gives the same mask here.
    base = np.random.default_rng(0).standard_normal((5, 4, 3)).astype(np.float32)
    view = torch.from_numpy(base).permute(*np.argsort(order))  # logical layout; memory order is `base`'s
    torch.manual_seed(3)
    want = torch.nn.Dropout(0.4)(view).numpy()
    from jax_impl.random import manual_seed

    manual_seed(3)
    got = nn.Dropout(0.4)(jnp.asarray(view.numpy()), mask_order=tuple(order))
    np.testing.assert_array_equal(np.asarray(got), want)
