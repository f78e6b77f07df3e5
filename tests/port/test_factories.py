"""Tensor factories in ``forward``: fx records them (sizes as numbers or read from the input) instead of baking
one result into the graph.

Ported models that draw random numbers: ``torch.randn_like``, ``randn``, ``rand``, ``randint``, ``normal`` and
``bernoulli`` become ``jax_impl.random.staged`` draws of torch's own stream, so ``check_port`` compares
identical noise (both generators seeded alike before each phase)."""

from __future__ import annotations

import torch

import parity
from tests.port import models


def test_the_official_vae_ports_and_its_noise_is_torchs(x64):
    for dtype in ("double", "float"):
        model = getattr(models.VAE(), dtype)()
        source = parity.port.port_source(model)
        assert "staged.randn_like(" in source and "from jax_impl.random import staged" in source
        check = parity.port.check_port(model, input_shape=(5, 12))
        assert check.passed, check.table()


def test_every_mapped_draw_in_a_forward(x64):
    model = models.NoisyDenoiser().double()
    source = parity.port.port_source(model)
    for call in ("staged.randint(0, 10,", "staged.rand(", "staged.normal(", "staged.bernoulli(", "staged.randn("):
        assert call in source, call
    check = parity.port.check_port(model, input_shape=(4, 6))
    assert check.passed, check.table()


class _TimeSequenceCell(torch.nn.Module):
    """The official time-sequence-prediction example's state initialisation, as written."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 51)

    def forward(self, input):
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        return self.fc(input) + h_t + torch.ones(input.shape[0], 1, dtype=torch.double)


def test_zeros_and_ones_sized_by_the_input_port(x64):
    model = _TimeSequenceCell().double()
    source = parity.port.port_source(model)
    assert "jnp.zeros((size, 51), dtype=jnp.float64)" in source
    check = parity.port.check_port(model, input_shape=(4, 3))
    assert check.passed, check.table()


class _TensorOps(torch.nn.Module):
    """Ops GAT, minGPT and forward-forward write: ``torch.where``, ``masked_fill``, ``clamp``, ``*_like``, ``.mT``."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        scores = h @ h.mT
        scores = scores.masked_fill(scores > 1.0, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        gated = torch.where(h > 0, h, torch.zeros_like(h))
        return att @ gated.clamp(min=-0.5, max=2.0) + torch.ones_like(h) * h.clamp(max=0.3)


def test_tensor_ops_of_real_models_port(x64):
    for dtype in ("double", "float"):
        model = getattr(_TensorOps(), dtype)()
        check = parity.port.check_port(model, input_shape=(2, 3, 4))
        assert check.passed, check.table()
