"""parity.convert module weights: torch state_dict <-> jax_impl.nn modules, strict and lossless."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
from parity.convert import load_torch_state_dict, module_state, tied_keys, to_torch_state_dict


def _pair():
    t = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    j = nn.Sequential(nn.Conv2d(1, 4, 3, rngs=nnx.Rngs(0)), nn.Flatten(), nn.Linear(4 * 4 * 4, 3, rngs=nnx.Rngs(1)))
    return t, j


@pytest.mark.parametrize("fmt", ["dict", "module", ".pt", ".safetensors"])
def test_load_then_export_round_trips_bit_for_bit(tmp_path, fmt):
    t, j = _pair()
    sd = t.state_dict()
    source = {"dict": sd, "module": t}.get(fmt)
    if source is None:
        source = tmp_path / f"w{fmt}"
        if fmt == ".pt":
            torch.save(sd, source)
        else:
            from safetensors.torch import save_file

            save_file(dict(sd), str(source))
    load_torch_state_dict(j, source)
    back = to_torch_state_dict(j)
    assert sorted(back) == sorted(sd)
    for k in sd:
        assert back[k].dtype == sd[k].dtype
        torch.testing.assert_close(back[k], sd[k], rtol=0, atol=0)
    x = np.random.default_rng(0).standard_normal((2, 1, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(j(x)), t(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    # Exported weights load into torch with strict=True.
    t2, _ = _pair()
    t2.load_state_dict(to_torch_state_dict(j, tmp_path / "out.pt"))
    t2.load_state_dict(torch.load(tmp_path / "out.pt", weights_only=True))


def test_missing_unexpected_and_shape_errors_name_every_key():
    t, j = _pair()
    sd = dict(t.state_dict())
    sd["extra.weight"] = sd.pop("0.bias")
    before = {k: np.asarray(v[...]) for k, v in module_state(j).items()}
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "0.bias".*\n.*Unexpected key\(s\) in state_dict: "extra.weight"'):
        load_torch_state_dict(j, sd)
    sd = dict(t.state_dict())
    sd["2.weight"] = torch.zeros(3, 5)
    with pytest.raises(RuntimeError, match=r"size mismatch for 2.weight: copying a param with shape \(3, 5\)"):
        load_torch_state_dict(j, sd)
    # Nothing was loaded by the failed calls.
    for k, v in module_state(j).items():
        np.testing.assert_array_equal(np.asarray(v[...]), before[k])
    # strict=False skips the unknown and missing keys.
    sd = dict(t.state_dict())
    sd.pop("0.bias")
    load_torch_state_dict(j, sd, strict=False)
    np.testing.assert_array_equal(np.asarray(j[2].weight[...]), t[2].weight.detach().numpy())


class _TiedTorch(torch.nn.Module):
    """A decoder tied to its embedding, and one layer registered twice (torch's state_dict lists both names)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(7, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
        self.blocks.append(self.blocks[0])
        self.head = torch.nn.Linear(4, 7, bias=False)
        self.head.weight = self.embed.weight


class _TiedJax(nn.Module):
    def __init__(self):
        self.head = nn.Linear(4, 7, bias=False, rngs=nnx.Rngs(0))
        self.blocks = nn.ModuleList([nn.Linear(4, 4, rngs=nnx.Rngs(1))])
        self.blocks.append(self.blocks[0])
        self.embed = nn.Embedding(7, 4, rngs=nnx.Rngs(2))
        self.embed.weight = self.head.weight


def test_shared_variables_are_listed_under_each_key_and_round_trip_through_torch():
    """A shared variable is one nnx leaf under every one of torch's keys: loading torch's state_dict (which lists
    it under each name) is strict, exporting gives torch every key back, and ``tied_keys`` names each alias by
    the key torch's ``named_parameters()`` keeps."""
    torch.manual_seed(0)
    t, j = _TiedTorch(), _TiedJax()
    sd = t.state_dict()
    assert sorted(module_state(j)) == sorted(sd)
    assert len(jax.tree.leaves(nnx.state(j, nnx.Param))) == len(list(t.parameters())) == 3
    load_torch_state_dict(j, sd)
    back = to_torch_state_dict(j)
    assert sorted(back) == sorted(sd)
    for k in sd:
        torch.testing.assert_close(back[k], sd[k], rtol=0, atol=0)
    t2 = _TiedTorch()
    t2.load_state_dict(back)
    assert t2.head.weight is t2.embed.weight
    torch.testing.assert_close(t2.embed.weight, t.embed.weight, rtol=0, atol=0)
    tied = tied_keys(j, sd)
    assert tied == {"head.weight": "embed.weight", "blocks.1.weight": "blocks.0.weight", "blocks.1.bias": "blocks.0.bias"}
    kept = {tied.get(".".join(map(str, p)), ".".join(map(str, p))) for p, _ in nnx.to_flat_state(nnx.state(j, nnx.Param))}
    assert kept == set(dict(t.named_parameters()))
