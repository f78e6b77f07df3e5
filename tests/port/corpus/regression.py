"""The regression example's features and model: copied verbatim from pytorch/examples ``regression/main.py`` (commit 77f55b912142).

The classes below are the example's own code, unedited (BSD-3-Clause, (c) the
PyTorch examples contributors); only the module-level names they read are set
here, at tiny sizes. ``CASES`` (after them) says how the port checks build them.
"""

# ruff: noqa
import torch
import torch.nn.functional as F

POLY_DEGREE = 4


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE+1)], 1)


class Regression(torch.nn.Module):
    """Harness: the example's ``fc = torch.nn.Linear(W_target.size(0), 1)`` applied to ``make_features(x)``,
    as its training loop does."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(POLY_DEGREE, 1)

    def forward(self, x):
        return self.fc(make_features(x))


CASES = {"regression.Regression": (Regression, lambda g, dtype: (torch.randn(8, generator=g, dtype=dtype),))}
