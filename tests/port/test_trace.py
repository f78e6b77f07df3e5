"""Models fx cannot trace, and nodes with no mapping: one clear error naming the node and the fallback; what the
trace takes from the example input instead (an assert on tensor values, Python's random draws, with a warning)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn

import parity
from parity.port import PortError
from parity.port.host_random import HostRandomWarning
from tests.port import models


def test_data_dependent_control_flow_names_the_node_and_line():
    with pytest.raises(NotImplementedError) as info:
        parity.port(models.Untraceable())
    message = str(info.value)
    assert isinstance(info.value, PortError)
    assert "node 'gt'" in message and "used as a Python bool" in message
    assert "models.py" in message and "if y.sum() > 0:" in message
    assert 'model: {torch: "pkg:Net", jax: "pkg:JaxNet"}' in message


class _UsesLen(nn.Module):
    def forward(self, x):
        return x * len(x)


def test_len_without_an_example_names_the_line_and_asks_for_one():
    with pytest.raises(PortError, match=r"has its length taken with len\(\) at .*test_trace.py:\d+: return x \* len\(x\).*"
                       r"pass an example input"):
        parity.port(_UsesLen())


class _Unmapped(nn.Module):
    def forward(self, x):
        return torch.histc(x, bins=4)


class _UnknownLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ChannelShuffle(2)

    def forward(self, x):
        return self.up(x)


class _InPlaceAlias(nn.Module):
    def forward(self, x):
        y = x * 2
        first = y[0]  # a view: torch's relu_ below changes it too; the twin could not
        y.relu_()
        return first + 1


@pytest.mark.parametrize("model, node, why", [
    (_Unmapped(), "node 'histc'", "no JAX mapping"),
    (_UnknownLayer(), "node 'up'", "jax_impl.nn has no ChannelShuffle"),
    (_InPlaceAlias(), "node 'relu_'", "modifies 'mul' in place"),
])
def test_unsupported_nodes_name_target_and_source_line(model, node, why):
    with pytest.raises(PortError) as info:
        parity.port.port_source(model)
    message = str(info.value)
    assert node in message and why in message and "test_trace.py" in message and "Fallback" in message


def test_the_models_modes_survive_the_two_traces():
    model = models.MnistNet()
    model.eval()
    model.fc1.train()
    parity.port.port_source(model)
    assert model.training is False and model.fc1.training is True and model.conv1.training is False


def test_training_branch_becomes_an_if_in_the_twin(x64):
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            y = self.fc(x)
            return y * 2 if self.training else y - 1

    model = Branchy().double()
    source = parity.port.port_source(model)
    assert "if self.training:" in source
    check = parity.port.check_port(model, input_shape=(2, 3))
    assert check.passed, check.table()


def test_porting_the_same_model_again_reuses_its_twin_module():
    """``parity.port`` registers each twin's module (nnx and pickling look classes up by module): porting the
    same model again reuses it, so ``sys.modules`` does not grow with every port, and the twin is the same class."""
    import sys

    import parity

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    first = parity.port(model, torch.zeros(2, 3))
    count = len(sys.modules)
    for _ in range(3):
        again = parity.port(model, torch.zeros(2, 3))
    assert len(sys.modules) == count and type(again) is type(first)


class _CheckedDecoder(nn.Module):
    """A decoder step with a sanity check on tensor values, as bentrevett/pytorch-seq2seq's attention decoder."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 3)

    def forward(self, x, hidden):
        output, hidden = self.rnn(x, hidden)
        assert (output == hidden).all()
        return output


def test_an_assert_on_tensor_values_holds_on_the_example_and_is_left_out(x64):
    """The assert changes no result: it held as torch ran the example, and the twin does not check it."""
    model = _CheckedDecoder().double()
    example = (torch.randn(1, 2, 3, dtype=torch.float64), torch.randn(1, 2, 3, dtype=torch.float64))
    assert "raise" not in parity.port.port_source(model, example).split("def __call__")[1]
    assert parity.port.check_port(model, example_input=example).passed


class _TeacherForcing(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        out = self.fc(x[0])
        for t in range(1, x.shape[0]):
            out = self.fc(x[t] if random.random() < 0.5 else out)
        return out


def test_a_python_random_draw_in_forward_warns_with_its_line():
    with pytest.warns(HostRandomWarning, match=r"random\.random at .*test_trace\.py:\d+: .*random\.random\(\) < 0\.5"):
        parity.port(_TeacherForcing(), torch.randn(3, 2, 3))


class _TensorOfASize(nn.Module):
    """The older milesial/Pytorch-UNet ``Up.forward``: padding computed as a tensor of a size difference."""

    def forward(self, x1, x2):
        diff = torch.tensor([x2.size()[2] - x1.size()[2]])
        return torch.cat([x2, torch.nn.functional.pad(x1, [diff // 2, diff - diff // 2, 0, 0])], dim=1)


def test_a_tensor_of_a_traced_size_names_its_line_once():
    with pytest.raises(PortError) as info:
        parity.port(_TensorOfASize(), (torch.randn(2, 2, 4, 4), torch.randn(2, 2, 5, 4)))
    message = str(info.value)
    assert "torch.tensor([...]) of a traced size is not mapped" in message
    assert message.count("diff = torch.tensor([x2.size()[2] - x1.size()[2]])") == 1
