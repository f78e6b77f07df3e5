"""Ported ``topk`` and unstable ``sort``/``argsort`` on tied inputs: the twin returns torch's CPU indices
(``jax_impl.sorting`` replays its libstdc++ algorithms) and sends the gradient to the same tied elements."""

from __future__ import annotations

import pytest
import torch

import parity


class TiedSorting(torch.nn.Module):
    """Unstable sort / argsort and topk in both topk branches (``k * 64 <= n`` and not, sorted or not)
    along a dim of 130 integer-valued elements; a ones weight shows where each gradient goes."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(2, 130))
        self.register_buffer("scale", torch.linspace(1.0, 2.0, 130))

    def forward(self, x):
        h = x * self.weight
        ordered = h.sort(descending=True)
        top = torch.topk(h, 2, dim=1)
        low = h.topk(40, largest=False, sorted=False)
        scale = self.scale
        return (ordered.values * scale, ordered.indices, h.argsort(dim=1), torch.argsort(h, 0, True),
                top.values * scale[:2], top.indices, low.values * scale[:40], low.indices)


@pytest.mark.slow  # compiling the twin forward and backward: seconds
def test_tied_sort_and_topk_port(x64):
    """float64: indices equal, values and gradients within check_port's 1e-12 (each value is a gathered
    input times a weight, so measured bit-identical)."""
    model = TiedSorting().double()
    x = torch.randint(-3, 4, (2, 130), generator=torch.Generator().manual_seed(0)).double()
    check = parity.port.check_port(model, example_input=x)
    assert check.passed, f"{check.table()}\n{parity.port.port_source(model)}"
    assert "torch_sort(mul, dim=1)[1]" in parity.port.port_source(model)
