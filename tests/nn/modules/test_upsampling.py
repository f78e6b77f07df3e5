"""Upsample, UpsamplingNearest2d and UpsamplingBilinear2d against torch: attributes as torch stores them, no
state, float64 output within 1e-12 (measured bit-identical: the same F.interpolate tables)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn

_ATTRS = ("name", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor")


@pytest.mark.parametrize(("name", "kwargs", "shape"), [
    ("Upsample", dict(scale_factor=2), (2, 3, 4, 5)),
    ("Upsample", dict(size=(7, 3), mode="bilinear", align_corners=True), (1, 2, 4, 5)),
    ("Upsample", dict(scale_factor=(1.5, 2), mode="bicubic", recompute_scale_factor=True), (1, 2, 4, 5)),
    ("Upsample", dict(scale_factor=1.7, mode="linear"), (2, 3, 6)),
    ("UpsamplingNearest2d", dict(size=5), (1, 2, 3, 4)),
    ("UpsamplingBilinear2d", dict(scale_factor=2), (1, 2, 3, 4)),
])
def test_matches_torch(name, kwargs, shape):
    theirs, ours = getattr(torch.nn, name)(**kwargs), getattr(jnn, name)(**kwargs)
    for attr in _ATTRS:
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert not dict(theirs.state_dict())
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    with jax.enable_x64(True):
        np.testing.assert_allclose(np.asarray(ours(jnp.asarray(x))), theirs(torch.tensor(x)).numpy(), rtol=0,
                                   atol=1e-12)


def test_scale_factor_is_stored_as_torch_stores_it():
    assert jnn.Upsample(scale_factor=2).scale_factor == 2.0 and isinstance(jnn.Upsample(scale_factor=2).scale_factor,
                                                                            float)
    assert jnn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)
    assert jnn.Upsample(size=3, scale_factor=0).scale_factor is None


def test_errors_come_from_interpolate():
    with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
        jnn.Upsample(size=2, scale_factor=2)(jnp.zeros((1, 1, 2, 2)))
    with pytest.raises(NotImplementedError, match="Got 3D input, but bilinear mode needs 4D input"):
        jnn.UpsamplingBilinear2d(size=2)(jnp.zeros((1, 1, 2)))
