"""Tied weights port as torch ties them: a parameter or layer registered under several names is one variable
of the twin, whose gradient sums every use (torch run in the test)."""

from __future__ import annotations

import jax
import pytest
import torch
import torch.nn.functional as F
from flax import nnx

import parity
from tests._tiers import slow_after


class _Tied(torch.nn.Module):
    """A language-model head tied to its embedding (Press & Wolf), a layer applied twice through two names, and a
    buffer shared by two holders."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(6, 6)])
        self.blocks.append(self.blocks[0])
        self.norm = torch.nn.LayerNorm(6)
        self.head = torch.nn.Linear(6, 11)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = x + F.gelu(block(x))
        return self.head(self.norm(x))


# float32 in the slow tier: the float64 case checks the same code, 1e-12 apart from torch.
@pytest.mark.parametrize("dtype", slow_after(["float64", "float32"]))
def test_a_tied_head_and_a_shared_layer_port_with_torchs_gradients(dtype, request):
    request.getfixturevalue("x64" if dtype == "float64" else "f32")
    torch.manual_seed(0)
    model = _Tied().to(getattr(torch, dtype))
    idx = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
    twin = parity.port(model, idx)
    # torch's parameters() counts a shared parameter once; so does the twin's state
    assert len(jax.tree.leaves(nnx.state(twin, nnx.Param))) == len(list(model.parameters())) == 6
    assert twin.head.weight is twin.embed.weight and twin.blocks[1] is twin.blocks[0]
    check = parity.port.check_port(model, twin, example_input=idx)
    assert check.passed, check.table()
    assert {f.key for f in dict(check.rows)["gradients"].compared} == set(dict(model.named_parameters()))
