"""pytorch/examples' language translation model (``language_translation/src/model.py``), ported by ``parity port``.

``PositionalEncoding`` and ``Translator`` (``tests/port/corpus/language_translation.py``) are copied verbatim from
github.com/pytorch/examples at 77f55b912142e11fcfdf5b530231fb9c52f181e8
(``language_translation/src/model.py``; that file names its model
``Translator``, it has no ``Seq2SeqTransformer`` or ``TokenEmbedding``), and
``generate_square_subsequent_mask`` / ``create_mask`` from its
``language_translation/src/data.py``. The model runs at a tiny size; a
harness module builds the forward inputs from one tensor of token ids as the
example's training loop does (``tgt_input = tgt[:-1, :]``, ``create_mask``,
``src_padding_mask`` also as ``memory_key_padding_mask``).
"""

from __future__ import annotations


import pytest
import torch
import torch.nn as tnn

import parity
from parity.convert import module_state
from parity.port.layers import layer_source


from tests.port.corpus.language_translation import Translator  # the example's verbatim copy


def generate_square_subsequent_mask(size, device):
    mask = (torch.triu(torch.ones((size, size), device=device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask

# Create masks for input into model
def create_mask(src, tgt, pad_idx, device):

    # Get sequence length
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]

    # Generate the mask
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len, device)
    src_mask = torch.zeros((src_seq_len, src_seq_len),device=device).type(torch.bool)

    # Overlay the mask over the original input
    src_padding_mask = (src == pad_idx).transpose(0, 1)
    tgt_padding_mask = (tgt == pad_idx).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask
# --- end of the example's code -------------------------------------------------------------------------------------

PAD, BOS, EOS = 1, 2, 3  # the example's special_symbols
SRC_LEN = 6


class TrainingStep(tnn.Module):
    """The example's ``train`` loop body up to the logits, on ``tokens`` = ``src`` rows then ``tgt`` rows."""

    def __init__(self, model: Translator, src_len: int = SRC_LEN) -> None:
        super().__init__()
        self.model = model
        self.src_len = src_len

    def forward(self, tokens):
        src, tgt = tokens[:self.src_len], tokens[self.src_len:]
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input, PAD, tokens.device)
        return self.model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)


def _tokens(seed: int = 0, batch: int = 3, src_len: int = SRC_LEN, tgt_len: int = 6) -> torch.Tensor:
    """Sentences as the example's collate_fn batches them: <bos> ids <eos>, padded with <pad>, (seq, batch)."""
    generator = torch.Generator().manual_seed(seed)
    columns = []
    for b in range(batch):
        column = []
        for length, vocab in ((src_len, 11), (tgt_len, 13)):
            n = length - 2 - b  # sentences of different lengths: every sequence but the first is padded
            ids = torch.randint(4, vocab, (n,), generator=generator).tolist()
            column += [BOS, *ids, EOS] + [PAD] * (length - n - 2)
        columns.append(column)
    return torch.tensor(columns).T


def _model(dtype=torch.float64) -> TrainingStep:
    torch.manual_seed(0)
    model = Translator(num_encoder_layers=2, num_decoder_layers=2, embed_size=8, num_heads=2, src_vocab_size=11,
                       tgt_vocab_size=13, dim_feedforward=16, dropout=0.1)
    return TrainingStep(model.to(dtype))


def test_translator_source_builds_nn_transformer():
    """The trace keeps nn.Transformer a leaf; its constructor arguments come from its encoder's and decoder's
    first layers, and the twin's state keys are the model's."""
    model = _model(torch.float32)
    source = parity.port.port_source(model)
    assert ("nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16)"
            in source)
    assert sorted(module_state(parity.port(model))) == sorted(model.state_dict())


@pytest.mark.slow  # compiling a transformer's train step and gradients: several seconds each
def test_float64_translator_within_1e_12(x64):
    """Eval and train forward (dropout 0.1 in the positional encoding and every layer, torch's masks), gradients
    and one SGD step on padded batches with the example's masks: measured 8.9e-15 absolute at worst
    (gradients); bar 1e-12."""
    model, tokens = _model(torch.float64), _tokens()
    check = parity.port.check_port(model, parity.port(model, tokens), tokens)
    assert check.passed, check.table()


@pytest.mark.slow
def test_float32_translator_within_1e_5(f32):
    """float32: measured 6.0e-7 absolute at worst on the outputs, 6.0e-6 on the gradients (decoder attention
    biases, two layers each side), within the 1e-5 tolerance without torch's float32 floor."""
    model, tokens = _model(torch.float32), _tokens()
    check = parity.port.check_port(model, parity.port(model, tokens), tokens)
    assert check.passed and {check.passed_by(phase) for phase, _ in check.rows} == {"tolerance"}, check.table()


@pytest.mark.parametrize(("layer", "source"), [
    (tnn.Transformer(8, 2, 2, 1, 16, 0.0),
     "nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, "
     "dropout=0.0)"),
    (tnn.Transformer(8, 2, 1, 1, 16, activation="gelu", layer_norm_eps=1e-6, batch_first=True, norm_first=True,
                     bias=False),
     "nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16, "
     "activation='gelu', layer_norm_eps=1e-06, batch_first=True, norm_first=True, bias=False)"),
    (tnn.Transformer(8, 2, num_decoder_layers=1, dim_feedforward=12, custom_encoder=tnn.TransformerEncoder(
        tnn.TransformerEncoderLayer(8, 2, 12), 2, enable_nested_tensor=False)),
     "nn.Transformer(d_model=8, nhead=2, num_decoder_layers=1, dim_feedforward=12, "
     "custom_encoder=nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, activation='relu'), "
     "2, enable_nested_tensor=False))"),
    (tnn.Transformer(8, 2, 1, dim_feedforward=12, custom_decoder=tnn.TransformerDecoder(
        tnn.TransformerDecoderLayer(8, 4, 12), 1)),
     "nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, dim_feedforward=12, "
     "custom_decoder=nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 4, dim_feedforward=12, "
     "activation='relu'), 1))"),
    (tnn.TransformerDecoder(tnn.TransformerDecoderLayer(4, 1, 8, batch_first=True), 2, norm=tnn.LayerNorm(4)),
     "nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 1, dim_feedforward=8, activation='relu', "
     "batch_first=True), 2, norm=nn.LayerNorm((4,)))"),
])
def test_transformer_arguments_read_from_its_layers(layer, source):
    """torch's Transformer keeps d_model, nhead and batch_first; the rest comes from the first encoder and decoder
    layers, and a part Transformer would not build from those arguments ports as custom_encoder/custom_decoder."""
    assert layer_source(layer, "layer") == source
