"""Sequential, ModuleList, Flatten/Unflatten and train()/eval() against torch.nn."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
from jax_impl.data import manual_seed


def _keys(module) -> list[str]:
    return sorted(".".join(map(str, k)) for k, _ in nnx.state(module, nnx.Param).flat_state())


def test_sequential_keys_and_forward_match_torch():
    torch.manual_seed(3)
    t = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Identity(),
                            torch.nn.Flatten(), torch.nn.Linear(2 * 4 * 4, 3))
    manual_seed(3)
    j = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Identity(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    assert _keys(j) == sorted(t.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 1, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(j(x)), t(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert len(j) == 4 and isinstance(j[-1], nn.Linear) and isinstance(j[0], nn.Conv2d)
    assert [type(m).__name__ for m in j[1:3]] == ["Identity", "Flatten"]
    with pytest.raises(IndexError):
        j[4]


def test_sequential_ordered_dict_names():
    j = nn.Sequential(OrderedDict(conv=nn.Conv1d(1, 1, 1), fc=nn.Linear(2, 2)))
    assert _keys(j) == ["conv.bias", "conv.weight", "fc.bias", "fc.weight"]
    assert _keys(j[1:]) == ["fc.bias", "fc.weight"]  # torch keeps names when slicing a Sequential


def test_module_list_append_extend_slice():
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 2)).extend([nn.Linear(2, 2)])
    assert len(ml) == 3 and _keys(ml[1:]) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    assert [m.out_features for m in ml] == [1, 2, 2]


def test_train_eval_recurse_like_torch():
    class Net(nn.Module):
        def __init__(self):
            self.body = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Identity()))
            self.head = nn.Linear(2, 1)

    net = Net()
    assert net.training and net.body[1][0].training  # torch modules start in training mode
    assert net.eval() is net
    assert not any(m.training for _, m in nnx.iter_modules(net))
    net.train()
    assert all(m.training for _, m in nnx.iter_modules(net))
    net.head.train(False)
    assert not net.head.training and net.training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train("yes")
    # flax's own switches reach these layers, and ours reach flax's layers.
    net.set_attributes(deterministic=True, raise_if_not_found=False)
    assert not net.training
    mixed = nn.Sequential(nn.Linear(2, 2), nnx.Dropout(0.5, rngs=nnx.Rngs(0)))
    mixed.eval()
    assert mixed[1].deterministic


@pytest.mark.parametrize("start, end", [(1, -1), (0, -1), (1, 2), (-3, -2), (2, 2)])
def test_flatten_matches_torch(start, end):
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(np.asarray(nn.Flatten(start, end)(x)),
                                  torch.nn.Flatten(start, end)(torch.tensor(x)).numpy())


@pytest.mark.parametrize("dim, sizes", [(1, (2, 6)), (-1, (5, 2)), (2, (-1, 2)), (1, (3, -1, 2))])
def test_unflatten_matches_torch(dim, sizes):
    x = np.arange(4 * 12 * 10, dtype=np.float32).reshape(4, 12, 10)
    want = torch.nn.Unflatten(dim, sizes)(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(np.asarray(nn.Unflatten(dim, sizes)(x)), want)
    with pytest.raises(ValueError, match="don't multiply up"):
        nn.Unflatten(1, (5, 5))(x)
