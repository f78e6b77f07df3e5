"""Image layers in ported models: the official super-resolution example (``PixelShuffle``, its orthogonal init)
and fast neural style's reflection-padded convolution and residual block (``InstanceNorm2d``), checked in
float64 and float32."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.init as init

import parity


class SuperResolutionNet(nn.Module):
    """``examples/super_resolution/model.py`` as written, at a tiny size."""

    def __init__(self, upscale_factor):
        super(SuperResolutionNet, self).__init__()  # noqa: UP008 - the example's own spelling
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 4, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(4, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


class ConvLayer(nn.Module):
    """``examples/fast_neural_style``'s ``ConvLayer``: reflection padding, then a convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()  # noqa: UP008
        reflection_padding = kernel_size // 2
        self.reflection_pad = nn.ReflectionPad2d(reflection_padding)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(nn.Module):
    """``examples/fast_neural_style``'s ``ResidualBlock``: reflection-padded convolutions with InstanceNorm2d."""

    def __init__(self, channels):
        super(ResidualBlock, self).__init__()  # noqa: UP008
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = nn.InstanceNorm2d(channels, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


def test_super_resolution_and_fast_neural_style_blocks_port(x64):
    for model, shape in ((SuperResolutionNet(3), (2, 1, 6, 6)), (ConvLayer(2, 3, 5, 2), (1, 2, 8, 8)),
                         (ResidualBlock(3), (2, 3, 6, 6))):
        for dtype in ("double", "float"):
            typed = getattr(model, dtype)()
            check = parity.port.check_port(typed, input_shape=shape)
            assert check.passed, check.table()
