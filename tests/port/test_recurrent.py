"""Recurrent models port: the official word-language-model's LSTM (embedding, two LSTM layers with dropout
between them, decoder), as written, checked in float64 and float32 with torch's dropout masks."""

from __future__ import annotations

import torch

import parity


class WordLanguageModel(torch.nn.Module):
    """``examples/word_language_model``'s ``RNNModel`` (LSTM) at a tiny size; its ``init_hidden`` state passed
    as the default zeros."""

    def __init__(self, ntoken=20, ninp=8, nhid=6, nlayers=2, dropout=0.3):
        super().__init__()
        self.ntoken = ntoken
        self.drop = torch.nn.Dropout(dropout)
        self.encoder = torch.nn.Embedding(ntoken, ninp)
        self.rnn = torch.nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = torch.nn.Linear(nhid, ntoken)

    def forward(self, input):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return torch.nn.functional.log_softmax(decoded, dim=1)


def test_the_word_language_model_ports(x64):
    tokens = torch.randint(0, 20, (5, 3), generator=torch.Generator().manual_seed(0))
    for dtype in ("double", "float"):
        model = getattr(WordLanguageModel(), dtype)()
        assert "nn.LSTM(8, 6, num_layers=2, dropout=0.3)" in parity.port.port_source(model)
        check = parity.port.check_port(model, example_input=tokens)
        assert check.passed, check.table()
