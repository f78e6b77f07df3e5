"""Image layers in ported models: the official super-resolution example (``PixelShuffle``, its orthogonal init)
and fast neural style's reflection-padded convolution and residual block (``InstanceNorm2d``), checked in
float64 and float32."""

from __future__ import annotations

import pytest

import parity
from tests.port.corpus.fast_neural_style import ConvLayer, ResidualBlock  # verbatim copies
from tests.port.corpus.super_resolution import Net as SuperResolutionNet


@pytest.mark.slow  # ~10 s; tests/port/test_corpus.py ports both examples whole (slow tier too)
def test_super_resolution_and_fast_neural_style_blocks_port(x64):
    for model, shape in ((SuperResolutionNet(3), (2, 1, 6, 6)), (ConvLayer(2, 3, 5, 2), (1, 2, 8, 8)),
                         (ResidualBlock(3), (2, 3, 6, 6))):
        for dtype in ("double", "float"):
            typed = getattr(model, dtype)()
            check = parity.port.check_port(typed, input_shape=shape)
            assert check.passed, check.table()
