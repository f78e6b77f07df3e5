"""A user's model pair for the data-parallel runner's tests: a small conv net with BatchNorm, in torch and
as its jax_impl twin (the same layers and names, so the state-dict keys match), named by import path."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import jax_impl.nn as jnn
import jax_impl.nn.functional as JF


class TorchNet(torch.nn.Module):
    """Conv(1, width, 3, padding 1) - BatchNorm - ReLU - max-pool 2 - Linear(width * 16, 10), on 1x8x8."""

    def __init__(self, width: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, width, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(width)
        self.drop = torch.nn.Dropout(dropout)
        self.fc = torch.nn.Linear(width * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class JaxNet(jnn.Module):
    """:class:`TorchNet` on ``jax_impl.nn``."""

    def __init__(self, width: int = 4, dropout: float = 0.0) -> None:
        self.conv = jnn.Conv2d(1, width, 3, padding=1)
        self.bn = jnn.BatchNorm2d(width)
        self.drop = jnn.Dropout(dropout)
        self.fc = jnn.Linear(width * 16, 10)

    def __call__(self, x):
        x = JF.max_pool2d(JF.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(x.reshape(x.shape[0], -1)))
