"""Transformer models ported automatically: Embedding, MultiheadAttention, TransformerEncoder(Layer),
LayerNorm/GroupNorm/RMSNorm and the functional attention calls, against torch run here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as tnn

import parity
from parity.convert import module_state
from parity.port import PortError
from parity.port.layers import layer_source
from tests.port import models


@pytest.mark.slow  # compiling a transformer's train step and gradients: several seconds each
@pytest.mark.parametrize("name", ["TinyGPT", "TinyViT"])
def test_float64_transformers_within_1e_12(x64, name):
    """Train mode with dropout 0.1 in every transformer layer (torch's masks on both sides), eval mode on
    torch's fast path, one SGD step: measured 3.6e-15 absolute at worst (gradients); bar 1e-12."""
    torch.manual_seed(0)
    model = getattr(models, name)().double()
    x = torch.randint(0, 11, (2, 5)) if name == "TinyGPT" else torch.randn(2, 3, 8, 8, dtype=torch.float64)
    twin = parity.port(model, x)
    assert sorted(module_state(twin)) == sorted(model.state_dict())
    check = parity.port.check_port(model, twin, x)
    assert check.passed, check.table()


@pytest.mark.slow
def test_float32_gpt_on_token_ids(f32):
    """float32 with integer input (the float64 floor run keeps the token ids): measured 1.4e-6 absolute at
    worst (gradients), within 1e-5 without the floor."""
    torch.manual_seed(0)
    model = models.TinyGPT()
    x = torch.randint(0, 11, (2, 5))
    check = parity.port.check_port(model, parity.port(model, x), x)
    assert check.passed and {check.passed_by(phase) for phase, _ in check.rows} == {"tolerance"}, check.table()


@pytest.mark.parametrize(("layer", "source"), [
    (tnn.MultiheadAttention(8, 2, bias=False, kdim=6, batch_first=True),
     "nn.MultiheadAttention(8, 2, bias=False, kdim=6, batch_first=True)"),
    (tnn.MultiheadAttention(8, 2, dropout=0.1, add_bias_kv=True),
     "nn.MultiheadAttention(8, 2, dropout=0.1, add_bias_kv=True)"),
    (tnn.TransformerEncoderLayer(8, 2, 16, 0.0, activation=tnn.GELU("tanh"), layer_norm_eps=1e-6, bias=False),
     "nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation=nn.GELU(approximate='tanh'), "
     "layer_norm_eps=1e-06, bias=False)"),
    (tnn.TransformerEncoder(tnn.TransformerEncoderLayer(4, 1, 8), 3, enable_nested_tensor=False),
     "nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 1, dim_feedforward=8, activation='relu'), 3, "
     "enable_nested_tensor=False)"),
    (tnn.Embedding(10, 4, padding_idx=0), "nn.Embedding(10, 4, padding_idx=0)"),
    (tnn.LayerNorm(4, elementwise_affine=False), "nn.LayerNorm((4,), elementwise_affine=False, bias=False)"),
])
def test_constructor_arguments_torch_keeps_inside_submodules(layer, source):
    assert layer_source(layer, "layer") == source


def test_an_activation_with_no_jax_spelling_names_the_layer():
    layer = tnn.TransformerEncoderLayer(4, 1, 8, activation=torch.tanh)
    with pytest.raises(PortError, match="block: its activation"):
        layer_source(layer, "block")


class _Positions(tnn.Module):
    def forward(self, x):
        n = x.size(-1)
        return x * torch.arange(n, device=x.device) + torch.arange(0.5, 0.5 + n * 0.25, 0.25)


def test_arange_on_the_inputs_device():
    """``torch.arange``: ``device`` dropped; a float range in torch's default dtype (jnp's would be the widest)."""
    source = parity.port.port_source(_Positions())
    assert "jnp.arange(size)" in source and ", 0.25, dtype=jnp.float32)" in source
    x = torch.randn(3, 2)
    got = np.asarray(parity.port(_Positions())(x.numpy()))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _Positions()(x).numpy())  # one multiply and one add: bit-identical


class _CausalScores(tnn.Module):
    def forward(self, x):
        t = x.size(1)
        mask = tnn.Transformer.generate_square_subsequent_mask(t, dtype=x.dtype)  # torch.full + torch.triu
        keep = torch.tril(torch.ones((t, t), dtype=x.dtype), diagonal=0) + torch.zeros((1, t), dtype=x.dtype)
        return torch.softmax(x @ x.transpose(1, 2) + mask, dim=-1) * keep


def test_masks_built_in_forward(x64):
    """torch's causal-mask helper (torch.full of -inf, torch.triu), torch.tril, torch.ones/zeros: eagerly,
    float64, measured 1 ulp at most (softmax); bar 1e-12."""
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    twin = parity.port(_CausalScores())
    np.testing.assert_allclose(np.asarray(twin(x.numpy())), _CausalScores()(x).numpy(), rtol=1e-12, atol=1e-12)
