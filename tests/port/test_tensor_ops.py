"""The helpers a twin carries for torch tensor operations, against torch."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl import tensor_ops as T

X = np.arange(2 * 7 * 3, dtype=np.float64).reshape(2, 7, 3)


def _same(got, expected):
    got = got if isinstance(got, (tuple, list)) else (got,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(g), e.numpy())


@pytest.mark.parametrize("chunks, dim", [(2, 1), (3, 1), (4, 1), (7, 1), (9, 1), (2, -1), (1, 0)])
def test_chunk(chunks, dim):
    _same(T.torch_chunk(jnp.asarray(X), chunks, dim), torch.from_numpy(X).chunk(chunks, dim))


@pytest.mark.parametrize("split, dim", [(2, 1), (3, 1), (7, 1), (10, 1), ([1, 4, 2], 1), ([2, 1], -1)])
def test_split(split, dim):
    _same(T.torch_split(jnp.asarray(X), split, dim), torch.from_numpy(X).split(split, dim))


@pytest.mark.parametrize("start, end", [(0, -1), (1, -1), (0, 1), (1, 2), (-2, -1)])
def test_flatten(start, end):
    _same(T.torch_flatten(jnp.asarray(X), start, end), torch.flatten(torch.from_numpy(X), start, end))


@pytest.mark.parametrize("shape", [((6, 7),), (6, -1), (-1,), ((2, 21),)])
def test_reshape(shape):
    _same(T.torch_reshape(jnp.asarray(X), *shape), torch.from_numpy(X).view(*shape))


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 2), -2])
def test_squeeze(dim):
    y = X.reshape(1, 2, 1, 21)
    expected = torch.from_numpy(y).squeeze() if dim is None else torch.from_numpy(y).squeeze(dim)
    _same(T.torch_squeeze(jnp.asarray(y), dim), expected)
