"""Spectral and weight normalisation through the port (parity/port/hooks.py), and the hooks it refuses.

A GAN's discriminator and generator as people write them: the hook forms (``torch.nn.utils.spectral_norm``,
``weight_norm``) and the parametrization forms on convolutions, transposed convolutions and linear layers,
ported and checked against torch (``check_port``: eval and train forward, the power iteration's buffers,
gradients, an SGD step).
"""

from __future__ import annotations

import warnings

import jax
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune

import parity
from parity.port import PortError
from tests._tiers import slow_except

SN, WN = nn.utils.spectral_norm, nn.utils.weight_norm
PSN, PWN = nn.utils.parametrizations.spectral_norm, nn.utils.parametrizations.weight_norm


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = SN(nn.Conv2d(3, 8, 4, 2, 1))
        self.conv2 = PSN(nn.Conv2d(8, 16, 4, 2, 1), n_power_iterations=2)
        self.blocks = nn.ModuleList([PWN(nn.Conv2d(16, 16, 3, padding=1), dim=None),
                                     SN(nn.Conv2d(16, 16, 1), eps=1e-6)])
        self.fc = SN(nn.Linear(16 * 2 * 2, 1))

    def forward(self, x):
        x = F.leaky_relu(self.conv1(x), 0.2)
        x = F.leaky_relu(self.conv2(x), 0.2)
        for block in self.blocks:
            x = x + F.leaky_relu(block(x), 0.2)
        return self.fc(torch.flatten(x, 1))


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = PWN(nn.Linear(8, 16 * 2 * 2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the hook form of weight_norm
            self.up1 = WN(nn.ConvTranspose2d(16, 8, 4, 2, 1))
        self.up2 = PSN(nn.ConvTranspose2d(8, 3, 4, 2, 1))

    def forward(self, z):
        x = F.relu(self.fc(z)).view(-1, 16, 2, 2)
        return torch.tanh(self.up2(F.relu(self.up1(x))))


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize(("model", "shape", "dtype"), slow_except(
    [(Discriminator, (2, 3, 8, 8), torch.float64), (Generator, (2, 8), torch.float64),
     (Discriminator, (2, 3, 8, 8), torch.float32), (Generator, (2, 8), torch.float32)],
    lambda case: case[0] is Generator and case[2] == torch.float64, several=True,
    ids=["discriminator-float64", "generator-float64", "discriminator-float32", "generator-float32"]))
def test_normalised_gan_ports_and_matches_torch(model, shape, dtype):
    torch.manual_seed(0)
    torch_model = model().to(dtype)
    x = torch.randn(shape, dtype=dtype)
    torch_model(x)  # one training-mode call first: the hook form's weight is then a tensor with history
    twin = parity.port(torch_model, x)
    check = parity.port.check_port(torch_model, twin, x)
    assert check.passed, check.table()


def test_twin_source_names_the_normalisations_with_torchs_defaults_left_out():
    torch.manual_seed(0)
    source = parity.port.port_source(Discriminator(), torch.zeros(2, 3, 8, 8))
    assert "self.conv1 = nn.utils.spectral_norm(nn.Conv2d(3, 8, (4, 4), stride=(2, 2), padding=(1, 1)))" in source
    assert "nn.utils.parametrizations.spectral_norm(nn.Conv2d(8, 16, (4, 4), stride=(2, 2), padding=(1, 1)), " \
           "n_power_iterations=2)" in source
    assert "nn.utils.parametrizations.weight_norm(nn.Conv2d(16, 16, (3, 3), padding=(1, 1)), dim=None)" in source
    assert "nn.utils.spectral_norm(nn.Conv2d(16, 16, (1, 1)), eps=1e-06)" in source


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x)


class _Symmetric(nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(-1, -2)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.weight


def _refused(model) -> str:
    with pytest.raises(PortError) as error:
        parity.port(model, torch.zeros(2, 3))
    return str(error.value)


def test_hooks_the_port_cannot_reproduce_are_refused_by_name():
    net = _Net()
    net.fc.register_forward_hook(lambda module, inputs, output: output * 2)
    assert "cannot port fc (Linear): it has a forward hook (<lambda>)" in _refused(net)

    net = _Net()
    net.fc.register_forward_pre_hook(lambda module, inputs: None)
    assert "cannot port fc (Linear): it has a forward pre hook (<lambda>)" in _refused(net)

    net = _Net()
    nn.utils.parametrize.register_parametrization(net.fc, "weight", _Symmetric())
    assert "cannot port fc.weight: its parametrization (_Symmetric) is not one of" in _refused(net)

    net = _Net()
    net.fc = SN(_Scaled())
    assert "its SpectralNorm hook is on a module the trace goes through" in _refused(net)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = nn.MultiheadAttention(3, 1, batch_first=True)

        def forward(self, x):
            return self.att(x, x, x)[0]

    net = Attention()
    SN(net.att.out_proj)  # inside a layer the port rebuilds from its arguments
    with pytest.raises(PortError, match="cannot port att.out_proj .* it is normalised, pruned or parametrized inside "
                                        "att, a torch.nn layer"):
        parity.port(net, torch.zeros(2, 5, 3))

    for normalised in (SN, PSN):  # a head tied to a normalised embedding reads the computed weight
        class Tied(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = normalised(nn.Embedding(7, 3))

            def forward(self, i):
                return F.linear(self.emb(i), self.emb.weight)

        with pytest.raises(PortError, match="emb.* outside (its|the) layer's own call"):
            parity.port(Tied(), torch.zeros(2, 4, dtype=torch.long))

    handle = nn.modules.module.register_module_forward_hook(lambda module, inputs, output: None)
    try:
        assert "a global module hook is registered" in _refused(_Net())
    finally:
        handle.remove()


def test_pruned_layers_port_with_their_masks():
    """torch's pruning, any method and several in a row, ports as ``nn.utils.prune.identity``: the mask
    (``weight_mask``) comes with the state dict, and no gradient flows to pruned entries."""

    class Pruned(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(2, 3, 3)
            self.fc = nn.Linear(6, 5)

        def forward(self, x):
            return self.fc(torch.flatten(F.relu(self.conv(x)), 1))

    torch.manual_seed(0)
    model = Pruned().double()
    torch.nn.utils.prune.l1_unstructured(model.fc, "weight", 0.4)
    torch.nn.utils.prune.random_unstructured(model.fc, "weight", 0.3)
    torch.nn.utils.prune.ln_structured(model.conv, "weight", 0.34, n=2, dim=0)
    x = torch.randn(2, 2, 4, dtype=torch.float64)
    assert "self.fc = nn.utils.prune.identity(nn.Linear(6, 5), 'weight')" in parity.port.port_source(model, x)
    check = parity.port.check_port(model, parity.port(model, x), x)
    assert check.passed, check.table()


class _IllConditioned(nn.Module):
    """A sum that cancels to about 1e-3 of its terms, then scaled by 1e9: the order of the sum shows."""

    def __init__(self):
        super().__init__()
        self.sum = nn.Linear(2000, 1, bias=False)
        self.scale = nn.Linear(1, 1, bias=False)

    def forward(self, x):
        return self.scale(self.sum(x))


def test_float64_verdict_against_torchs_own_sensitivity():
    """A float64 output beyond 1e-12 that torch's own result moves by as much when its inputs move by one
    rounding passes by torch's float64 floor; a weight off by 1e-9 relative does not."""
    generator = torch.Generator().manual_seed(0)
    model = _IllConditioned().double()
    x = torch.randn(4, 2000, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        w = torch.randn(1, 2000, generator=generator, dtype=torch.float64)
        w -= (x[0] @ w[0] / (x[0] @ x[0])) * x[0]  # nearly orthogonal to the first sample
        model.sum.weight.copy_(w)
        model.scale.weight.fill_(1e9)
    twin = parity.port(model, x)
    check = parity.port.check_port(model, twin, x)
    assert check.passed, check.table()
    assert check.passed_by("eval forward") in ("tolerance", "floor")
    twin.sum.weight[...] = twin.sum.weight[...] * (1 + 1e-9)
    assert not parity.port.check_port(model, twin, x).passed
