"""Reference models built from ``torch.nn``: LeNet, torchvision's ResNet-18/34/50 and a ViT (ViT-Ti/16).

The ResNets follow ``torchvision/models/resnet.py`` (torchvision 0.2x) line
for line: module names (``conv1``, ``bn1``, ``layer1.0.conv1``,
``downsample.0``, ``fc``), strides on the 3x3 conv of a Bottleneck (ResNet
v1.5), the init (``kaiming_normal_(mode='fan_out', nonlinearity='relu')`` for
convs, BatchNorm weight 1 / bias 0, torch's default Linear init) and
``zero_init_residual``, so a torchvision checkpoint loads with
``strict=True``. torchvision itself is not a dependency.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from jax_impl.models.geometry import lenet_geometry  # one geometry for both sides, without jax

__all__ = ["BasicBlock", "Bottleneck", "LeNet", "ResNet", "VisionTransformer", "lenet_geometry", "resnet18", "resnet34",
           "resnet50", "vit_tiny"]


class LeNet(nn.Module):
    """LeNet-5 with ReLU and max pooling: conv-pool-conv-pool-fc(120)-fc(84)-fc(num_classes).

    Args:
      num_classes: outputs of the last layer.
      in_channels: 3 for 3x32x32 images, 1 for the 1x8x8 digits.
      image_size: input height = width (see :func:`lenet_geometry`).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 8) -> None:
        super().__init__()
        kernel, padding, size = lenet_geometry(image_size)
        self.conv1 = nn.Conv2d(in_channels, 6, kernel, padding=padding)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, kernel, padding=padding)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(16 * size * size, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups,
                     bias=False, dilation=dilation)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion: int = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64, dilation: int = 1,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion: int = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64, dilation: int = 1,
                 norm_layer: Callable[..., nn.Module] | None = None) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet (``groups``/``width_per_group``/dilation options omitted: plain ResNets only)."""

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000,
                 zero_init_residual: bool = False) -> None:
        super().__init__()
        norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer
        self.inplanes = 64
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        norm_layer = self._norm_layer
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, self.dilation,
                        norm_layer)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                                dilation=self.dilation, norm_layer=norm_layer))
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000, **kwargs) -> ResNet:
    """torchvision ``resnet18(weights=None)``: BasicBlock, [2, 2, 2, 2]."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes, **kwargs)


def resnet34(num_classes: int = 1000, **kwargs) -> ResNet:
    """torchvision ``resnet34(weights=None)``: BasicBlock, [3, 4, 6, 3]."""
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes=num_classes, **kwargs)


def resnet50(num_classes: int = 1000, **kwargs) -> ResNet:
    """torchvision ``resnet50(weights=None)``: Bottleneck, [3, 4, 6, 3]."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes, **kwargs)


class VisionTransformer(nn.Module):
    """A ViT on ``torch.nn``'s own transformer: patches by a strided conv, a class token, learned position
    embeddings, a pre-norm ``nn.TransformerEncoder`` (GELU, LayerNorm eps 1e-6), a final LayerNorm and a
    linear head on the class token.

    torchvision's ``VisionTransformer`` with its ``EncoderBlock`` replaced by
    ``nn.TransformerEncoderLayer(norm_first=True, batch_first=True)``, the
    same computation: ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``. Its
    keys are ``conv_proj``, ``class_token``, ``pos_embedding``,
    ``encoder.layers.{i}.self_attn`` / ``linear1`` / ``linear2`` /
    ``norm1`` / ``norm2``, ``ln`` and ``head``. The encoder's layers start
    as copies of one layer, as ``nn.TransformerEncoder`` makes them.

    Args:
      image_size: input height = width, a multiple of ``patch_size``.
      patch_size: the side of a square patch.
      num_layers, num_heads, hidden_dim, mlp_dim: the encoder's depth, heads, width and feed-forward width.
      num_classes: outputs of the head.
      dropout: dropout in the encoder layers (attention, residual branches, feed-forward).
    """

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_layers: int = 12, num_heads: int = 3,
                 hidden_dim: int = 192, mlp_dim: int = 768, num_classes: int = 1000, dropout: float = 0.0) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, stride=patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        seq = (image_size // patch_size) ** 2 + 1
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, hidden_dim).normal_(std=0.02))
        layer = nn.TransformerEncoderLayer(hidden_dim, num_heads, mlp_dim, dropout, activation="gelu",
                                           layer_norm_eps=1e-6, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[0]
        x = self.conv_proj(x).flatten(2).transpose(1, 2)  # (N, patches, hidden)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.encoder(x))[:, 0])


def vit_tiny(num_classes: int = 1000, image_size: int = 224, **kwargs) -> VisionTransformer:
    """ViT-Ti/16 (DeiT-tiny's shape): patch 16, 12 layers, 3 heads, width 192, feed-forward 768."""
    return VisionTransformer(image_size=image_size, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192,
                             mlp_dim=768, num_classes=num_classes, **kwargs)
