"""The PyTorch MNIST example's network (pytorch/examples ``mnist/main.py``), in torch and as its jax_impl twin.

A user model for ``parity run``: ``configs/mnist_example.yaml`` names both
classes by import path. The twin is the torch code with ``torch.nn`` replaced
by ``jax_impl.nn`` and ``torch.nn.functional`` by ``jax_impl.nn.functional``:
same layers, same names, so the state-dict keys match.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import jax_impl.nn as jnn
import jax_impl.nn.functional as JF


class Net(torch.nn.Module):
    """Conv(1, c1, 3) - Conv(c1, c2, 3) - max-pool - Dropout(0.25) - Linear(., hidden) - Dropout(0.5) -
    Linear(hidden, 10), log-softmax: the example's network, its sizes as arguments."""

    def __init__(self, c1: int = 32, c2: int = 64, hidden: int = 128, image_size: int = 28) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, c1, 3, 1)
        self.conv2 = torch.nn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(c2 * ((image_size - 4) // 2) ** 2, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = torch.flatten(x, 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


class JaxNet(jnn.Module):
    """:class:`Net` on ``jax_impl.nn``."""

    def __init__(self, c1: int = 32, c2: int = 64, hidden: int = 128, image_size: int = 28) -> None:
        self.conv1 = jnn.Conv2d(1, c1, 3, 1)
        self.conv2 = jnn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = jnn.Dropout(0.25)  # torch's masks, from the global generator torch's would use
        self.dropout2 = jnn.Dropout(0.5)
        self.fc1 = jnn.Linear(c2 * ((image_size - 4) // 2) ** 2, hidden)
        self.fc2 = jnn.Linear(hidden, 10)

    def __call__(self, x):
        x = JF.relu(self.conv1(x))
        x = JF.relu(self.conv2(x))
        x = self.dropout1(JF.max_pool2d(x, 2))
        x = x.reshape(x.shape[0], -1)
        x = self.dropout2(JF.relu(self.fc1(x)))
        return JF.log_softmax(self.fc2(x), dim=1)
