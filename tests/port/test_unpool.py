"""An encoder-decoder that carries max pooling's indices to unpooling (SegNet's pattern) ports as written.

Both of torch's forms: ``nn.MaxPool2d(return_indices=True)`` with ``nn.MaxUnpool2d`` (and its
``output_size``), and ``F.max_pool2d(..., return_indices=True)`` (which torch.fx records as
``max_pool2d_with_indices``) with ``F.max_unpool2d``. ``check_port`` in float64: eval and training forward,
BatchNorm's buffers, gradients and an SGD step within 1e-12 of torch.
"""

from __future__ import annotations

import jax
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import parity


class _SegNetLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.enc2 = nn.Conv2d(6, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)
        self.dec2 = nn.Conv2d(8, 6, 3, padding=1)
        self.dec1 = nn.Conv2d(6, 4, 3, padding=1)

    def forward(self, x):
        x = self.bn1(F.relu(self.enc1(x)))
        size1 = x.size()
        x, i1 = self.pool(x)
        x = F.relu(self.enc2(x))
        size2 = x.size()
        x, i2 = F.max_pool2d(x, 2, 2, return_indices=True)
        x = F.max_unpool2d(x, i2, 2, 2, output_size=size2)
        x = F.relu(self.dec2(x))
        x = self.unpool(x, i1, output_size=size1)  # odd sizes: the output size comes from the encoder
        return F.log_softmax(self.dec1(x), dim=1)


@pytest.mark.slow  # about 5 s: the port's trace and check in float64
def test_pooling_indices_carried_to_unpooling_port_and_match_torch():
    torch.manual_seed(0)
    model = _SegNetLike().double()
    x = torch.randn(2, 3, 11, 14, dtype=torch.float64)
    with jax.enable_x64(True):
        twin = parity.port(model, x)
        check = parity.port.check_port(model, twin, x)
    assert check.passed, check.table()
    assert "F.max_unpool2d" in parity.port.port_source(model, x)
