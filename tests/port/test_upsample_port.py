"""Upsampling in ported models: fast neural style's ``UpsampleConvLayer`` (``F.interpolate`` in its forward,
mapped to ``jax_impl.nn.functional.interpolate``) and ``nn.Upsample`` layers (mapped to ``jax_impl.nn.Upsample``
with torch's attributes), checked in float64 and float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import parity


from tests.port.corpus.fast_neural_style import UpsampleConvLayer  # the example's verbatim copy


def test_fast_neural_style_upsample_conv_layer_ports(x64):
    model = UpsampleConvLayer(3, 2, kernel_size=3, stride=1, upsample=2)
    assert "F.interpolate(" in parity.port.port_source(model)
    for dtype in ("double", "float"):
        x = torch.randn(2, 3, 5, 4, dtype=getattr(torch, dtype))
        check = parity.port.check_port(getattr(model, dtype)(), example_input=x)
        assert check.passed, check.table()


@pytest.mark.slow  # three layers ported and checked in two dtypes: ~3 s
def test_upsample_layers_port(x64):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Upsample(scale_factor=2, mode="bilinear"),
                          nn.UpsamplingBilinear2d(size=(9, 7)), nn.Upsample(scale_factor=1.5))
    source = parity.port.port_source(model)
    assert "nn.Upsample(scale_factor=2.0, mode='bilinear')" in source
    assert "nn.UpsamplingBilinear2d(size=(9, 7))" in source
    for dtype in ("double", "float"):
        check = parity.port.check_port(getattr(model, dtype)(), input_shape=(2, 3, 6, 5))
        assert check.passed, check.table()
