"""Forward-forward's layer: copied verbatim from pytorch/examples ``mnist_forward_forward/main.py`` (commit 77f55b912142).

The classes below are the example's own code, unedited (BSD-3-Clause, (c) the
PyTorch examples contributors); only the module-level names they read are set
here, at tiny sizes. ``CASES`` (after them) says how the port checks build them.
"""

# ruff: noqa
import argparse

import torch
import torch.nn as nn
from torch.optim import Adam

args = argparse.Namespace(lr=0.03, threshold=2.0, epochs=1, log_interval=10)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(
                torch.exp(
                    torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
                )
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if i % args.log_interval == 0:
                print("Loss: ", loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


CASES = {"forward_forward.Layer": (lambda: Layer(12, 6), lambda g, dtype: (torch.randn(4, 12, generator=g, dtype=dtype),))}
