"""The VAE example's model: copied verbatim from pytorch/examples ``vae/main.py`` (commit 77f55b912142).

The classes below are the example's own code, unedited (BSD-3-Clause, (c) the
PyTorch examples contributors); only the module-level names they read are set
here, at tiny sizes. ``CASES`` (after them) says how the port checks build them.
"""

# ruff: noqa
import torch
from torch import nn
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


CASES = {"vae.VAE": (VAE, lambda g, dtype: (torch.rand(2, 1, 28, 28, generator=g, dtype=dtype),))}
