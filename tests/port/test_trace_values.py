"""The trace with an example input: Python code on sizes, devices, lengths and forward's default arguments
ports, each decision guarded in the twin; code on tensor values stays refused."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import parity
from parity.port import PortError


class _DeviceBranch(nn.Module):
    """DCGAN's ``if input.is_cuda and self.ngpu > 1`` shape, with the data-parallel branch never taken on CPU."""

    def __init__(self, ngpu=2):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(nn.Linear(4, 3), nn.Tanh())

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output.view(-1, 1).squeeze(1)


class _Gpt(nn.Module):
    """minGPT's ``assert t <= self.block_size``, ``targets=None`` and a size-sliced buffer."""

    def __init__(self, block_size=6):
        super().__init__()
        self.block_size = block_size
        self.emb = nn.Embedding(11, 8)
        self.pos = nn.Parameter(torch.randn(1, block_size, 8))
        self.head = nn.Linear(8, 11)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        x = self.emb(idx) + self.pos[:, :t, :]
        att = (x @ x.transpose(-2, -1)) * (1.0 / math.sqrt(x.size(-1)))
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        logits = self.head(F.softmax(att, dim=-1) @ x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


class _Loops(nn.Module):
    """time-sequence's loop over ``split`` and a ``future`` count, ``len()`` and ``range(x.size(1))``."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(1, 5)
        self.out = nn.Linear(5, 1)

    def forward(self, input, future=0):
        outputs = []
        h = torch.zeros(input.size(0), 5, dtype=input.dtype)
        c = torch.zeros(input.size(0), 5, dtype=input.dtype)
        for input_t in input.split(1, dim=1):
            h, c = self.cell(input_t, (h, c))
            outputs += [self.out(h)]
        for _ in range(future):
            h, c = self.cell(outputs[-1], (h, c))
            outputs += [self.out(h)]
        steps = sum(input[:, i] for i in range(input.size(1))) / len(outputs)
        return torch.cat(outputs, dim=1) + steps.unsqueeze(1)


class _CachedMask(nn.Module):
    """The word-language-model Transformer's mask, built with ``len(src)`` and cached on ``self`` in forward."""

    def __init__(self):
        super().__init__()
        self.src_mask = None
        self.emb = nn.Embedding(13, 8)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 1,
                                             enable_nested_tensor=False)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = torch.log(torch.tril(torch.ones(len(src), len(src)))).to(device)
        else:
            self.src_mask = None
        return self.encoder(self.emb(src), mask=self.src_mask)


def test_device_checks_and_constructor_flags_are_python_values(x64):
    model = _DeviceBranch().double()
    x = torch.randn(3, 4, dtype=torch.float64)
    source = parity.port.port_source(model, x)
    assert "data_parallel" not in source and "is_cuda" not in source
    assert parity.port.check_port(model, example_input=x).passed


def test_an_assert_on_a_size_and_a_none_default_port_and_guard_the_twin(x64):
    torch.manual_seed(0)
    model = _Gpt().double()
    idx = torch.randint(0, 11, (2, 5))
    source = parity.port.port_source(model, idx)
    assert "def __call__(self, idx, targets=None):" in source
    check = parity.port.check_port(model, example_input=idx)
    assert check.passed, check.table()
    twin = parity.port(model, idx)
    twin.eval()
    # Shorter sequences take the same path: the twin follows the input's length, as torch does.
    logits, loss = twin(jnp.asarray(idx[:, :3].numpy()))
    np.testing.assert_allclose(np.asarray(logits), model.eval()(idx[:, :3])[0].detach().numpy(), rtol=1e-12)
    assert loss is None
    # torch's assert fails past block_size; so does the twin's guard, naming the line.
    with pytest.raises(ValueError, match=r"assert t <= self.block_size.*gave True, this input gives False"):
        twin(jnp.zeros((2, 7), jnp.int32))
    # The branch the trace did not take cannot be asked for silently.
    with pytest.raises(ValueError, match="targets has been specialized to have value None"):
        twin(jnp.asarray(idx.numpy()), jnp.asarray(idx.numpy()))


@pytest.mark.slow
def test_a_targets_example_takes_the_loss_branch(x64):
    torch.manual_seed(0)
    model = _Gpt().double()
    idx, targets = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5))
    source = parity.port.port_source(model, (idx, targets))
    assert "F.cross_entropy" in source
    assert parity.port.check_port(model, example_input=(idx, targets)).passed


def test_loops_over_split_range_and_a_future_count_unroll(x64):
    torch.manual_seed(0)
    model = _Loops().double()
    x = torch.randn(3, 4, dtype=torch.float64)
    assert parity.port.check_port(model, example_input=x).passed
    assert parity.port.check_port(model, example_input=(x, 2)).passed
    twin = parity.port(model, x)
    with pytest.raises(ValueError, match=r"for input_t in input.split\(1, dim=1\).*gave 4, this input gives 6"):
        twin(jnp.zeros((3, 6)))


@pytest.mark.slow
def test_a_mask_cached_on_self_in_forward_ports_and_the_model_is_left_alone(x64):
    torch.manual_seed(0)
    model = _CachedMask().double()
    src = torch.randint(0, 13, (5, 2))
    check = parity.port.check_port(model, example_input=src)
    assert check.passed, check.table()
    assert model.src_mask is None  # the traces ran on copies
    assert parity.port.check_port(model, example_input=(src, False)).passed


def test_tracing_leaves_torchs_generator_where_it_was():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    torch.manual_seed(3)
    before = torch.get_rng_state()
    parity.port.port_source(model, torch.randn(2, 4, generator=torch.Generator()))
    assert torch.equal(torch.get_rng_state(), before)


class _DataBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


class _ItemScale(nn.Module):
    def forward(self, x):
        scale = x.abs().max().item()
        if scale > 1:
            return x / scale
        return x


@pytest.mark.parametrize("model, line", [(_DataBranch(), "if y.sum() > 0:"), (_ItemScale(), "if scale > 1:")])
def test_control_flow_on_tensor_values_stays_refused(model, line):
    with pytest.raises(PortError, match=r"depends on tensor values") as info:
        parity.port.port_source(model, torch.randn(2, 4))
    assert line in str(info.value) and "test_trace_values.py" in str(info.value)


def test_a_model_that_fails_on_its_example_says_so_with_the_line():
    with pytest.raises(PortError, match=r"_DataBranch fails on the example input at .*y = self.fc\(x\).*mat1 and mat2"):
        parity.port.port_source(_DataBranch(), torch.randn(2, 5))


def test_too_many_example_inputs_is_a_port_error():
    with pytest.raises(PortError, match="forward takes 1 inputs; the example gives 2"):
        parity.port.port_source(_DataBranch(), (torch.randn(2, 4), torch.randn(2, 4)))
