"""torch.nn's layer classes as ``flax.nnx`` modules (see :mod:`jax_impl.nn`)."""

from jax_impl.nn.modules.container import ModuleList, Sequential
from jax_impl.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from jax_impl.nn.modules.flatten import Flatten, Unflatten
from jax_impl.nn.modules.linear import Identity, Linear
from jax_impl.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from jax_impl.nn.modules.module import Buffer, Module
from jax_impl.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "BCELoss", "BCEWithLogitsLoss", "Buffer",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "CrossEntropyLoss", "Flatten", "HuberLoss", "Identity", "KLDivLoss", "L1Loss", "Linear",
    "MSELoss", "MaxPool1d", "MaxPool2d", "MaxPool3d", "Module", "ModuleList", "NLLLoss",
    "Sequential", "SmoothL1Loss", "Unflatten",
]
