"""In-place tensor code ports where the twin can give torch's result: a tensor the forward made itself is
mutated and read again (timm's stochastic depth), filled with torch's draws (``bernoulli_``, ``normal_``);
where a read could see torch's tensor change through another name, the port refuses (torch run in the test)."""

from __future__ import annotations

import pytest
import torch

import parity
from parity.port.errors import PortError
from tests._tiers import slow_after
from tests.port.corpus.convnext import drop_path  # timm's, verbatim


class _Residual(torch.nn.Module):
    """A residual block with timm's drop path, and noise made the in-place way."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            noise = torch.empty_like(y).normal_(0.5, 2.0)
            gate = torch.empty_like(y).bernoulli_(torch.sigmoid(y))  # a tensor p: torch's tensor kernel
            y = y + 0.1 * noise * gate
        return x + drop_path(y, 0.4, self.training)


# float32 in the slow tier: the float64 case checks the same code, 1e-12 apart from torch.
@pytest.mark.parametrize("dtype", slow_after(["float64", "float32"]))
def test_drop_path_and_in_place_draws_port_with_torchs_numbers(dtype, request):
    request.getfixturevalue("x64" if dtype == "float64" else "f32")
    torch.manual_seed(0)
    model = _Residual().to(getattr(torch, dtype))
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(1), dtype=getattr(torch, dtype))
    source = parity.port.port_source(model, x)
    assert "staged.bernoulli_fill" in source and "staged.normal_fill" in source
    check = parity.port.check_port(model, example_input=x)
    assert check.passed, check.table()


class _ViewThenMutate(torch.nn.Module):
    def forward(self, x):
        t = x * 2
        first = t[0]  # a view: torch's `first` sees the mul_ below
        t.mul_(3)
        return first + t


class _MutatedInput(torch.nn.Module):
    def forward(self, x):
        x.mul_(3)  # the caller's tensor changes too
        return x + 1


class _MutateAView(torch.nn.Module):
    def forward(self, x):
        t = x * 2
        t.view(-1).mul_(3)  # changes t through its view
        return t + 1


class _ViewThenMutateAndReturnTheView(torch.nn.Module):
    def forward(self, x):
        t = x * 2
        first = t[0]
        t.relu_()
        return first + 1


@pytest.mark.parametrize("model", [_ViewThenMutate(), _MutatedInput(), _MutateAView(),
                                   _ViewThenMutateAndReturnTheView()],
                         ids=["viewed-and-read", "input", "through-a-view", "viewed"])
def test_an_in_place_op_whose_tensor_another_name_sees_is_refused(model):
    with pytest.raises(PortError, match="in place and .* afterwards"):
        parity.port(model, torch.randn(3, 4))


class _Decoder(torch.nn.Module):
    """A decoding loop writing each step's output into a buffer (``outputs[t] = output``, a seq2seq model's
    loop), a mask assignment and a slice assignment of a number."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        outputs = torch.zeros(x.shape[0], x.shape[1], 3).to(x.device)  # float32 whatever x's dtype, as torch's
        for t in range(1, x.shape[0]):
            outputs[t] = self.fc(x[t])
        y = self.fc(x)
        y[y < 0] = 0.5
        outputs[0, :, 1:] = 7
        return outputs, y


# float32 in the slow tier: the float64 case checks the same code, 1e-12 apart from torch.
@pytest.mark.parametrize("dtype", slow_after(["float64", "float32"]))
def test_item_assignment_into_the_forwards_own_tensor_ports(dtype, request):
    request.getfixturevalue("x64" if dtype == "float64" else "f32")
    torch.manual_seed(0)
    model = _Decoder().to(getattr(torch, dtype))
    x = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(1), dtype=getattr(torch, dtype))
    assert ".at[1].set(" in parity.port.port_source(model, x)
    check = parity.port.check_port(model, example_input=x)
    assert check.passed, check.table()


class _AssignIntoInput(torch.nn.Module):
    def forward(self, x):
        x[0] = 1.0  # the caller's tensor changes
        return x * 2


class _AssignTensorByMask(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[y > 0] = x[x > 0]  # how many elements: a tensor value
        return y


@pytest.mark.parametrize("model, why", [(_AssignIntoInput(), "in place and .* afterwards"),
                                        (_AssignTensorByMask(), "x\\[mask\\] = tensor")], ids=["input", "mask"])
def test_item_assignment_the_twin_cannot_write_is_refused(model, why):
    with pytest.raises(PortError, match=why):
        parity.port(model, torch.randn(3, 4))
