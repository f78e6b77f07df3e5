"""Models that pack their variable-length batches (``torch.nn.utils.rnn``) port as written and match torch.

The three models below are written the ways public sequence classifiers and
taggers call the packing functions: imported by name or through
``nn.utils.rnn``, ``enforce_sorted`` both ways, ``lengths.cpu()``,
``total_length=``, the last hidden state of a packed GRU, and the padded
output indexed with the lengths. Each is ported from its example input and
checked by ``check_port`` (outputs, gradients, one SGD step) in float64 and
float32.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from parity.port import check_port, port_source


class Tagger(nn.Module):
    def __init__(self, vocab=20, emb=6, hidden=5, tags=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False)
        output, (h, c) = self.lstm(packed)
        padded, _ = pad_packed_sequence(output, batch_first=True, total_length=tokens.size(1))
        return self.out(padded)


class GRUClassifier(nn.Module):
    def __init__(self, vocab=20, emb=6, hidden=7, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.gru = nn.GRU(emb, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, text, text_lengths):
        embedded = self.embed(text)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, text_lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, hidden = self.gru(packed)
        return self.fc(hidden[-1])


class SortedRNN(nn.Module):
    """Time-major, lengths sorted longest first (``enforce_sorted`` default), the last valid step of each
    sequence picked from the padded output."""

    def __init__(self, features=4, hidden=5):
        super().__init__()
        self.rnn = nn.RNN(features, hidden, num_layers=2, nonlinearity="relu")
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, lengths):
        output, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(pack_padded_sequence(x, lengths))[0])
        last = output[lengths - 1, torch.arange(x.size(1))]
        return self.head(last).squeeze(-1)


def _example(name: str, dtype: torch.dtype):
    generator = torch.Generator().manual_seed(1)
    if name == "SortedRNN":
        x = torch.randn(6, 3, 4, generator=generator, dtype=dtype)
        return SortedRNN().to(dtype), (x, torch.tensor([6, 4, 2]))
    tokens = torch.randint(1, 20, (4, 7), generator=generator)
    lengths = torch.tensor([7, 3, 5, 1])
    tokens[torch.arange(7) >= lengths[:, None]] = 0
    model = {"Tagger": Tagger, "GRUClassifier": GRUClassifier}[name]()
    return model.to(dtype), (tokens, lengths)


# One case in the default tier (about 3 s of compiling); the grid in the slow tier.
CASES = [pytest.param(name, dtype, id=f"{name}-{str(dtype)[6:]}",
                      marks=() if (name, dtype) == ("Tagger", torch.float64) else pytest.mark.slow)
         for name in ("Tagger", "GRUClassifier", "SortedRNN") for dtype in (torch.float64, torch.float32)]


@pytest.mark.parametrize(("name", "dtype"), CASES)
def test_packed_sequence_models_port_and_match_torch(x64, name, dtype):
    torch.manual_seed(0)
    model, example = _example(name, dtype)
    check = check_port(model, example_input=example)
    assert check.passed, check.table()


def test_the_twin_calls_jax_impls_packing_functions():
    torch.manual_seed(0)
    model, example = _example("GRUClassifier", torch.float32)
    source = port_source(model, example)
    assert "= text_lengths\n" in source  # `text_lengths.cpu()`: the array itself
    assert "nn.utils.rnn.pack_padded_sequence(embed, cpu, batch_first=True, enforce_sorted=False)" in source
