"""Ported models that draw random numbers: ``torch.randn_like``, ``randn``, ``rand``, ``randint``, ``normal`` and
``bernoulli`` become ``jax_impl.random.staged`` draws of torch's own stream, so ``check_port`` compares
identical noise (both generators seeded alike before each phase)."""

from __future__ import annotations

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
