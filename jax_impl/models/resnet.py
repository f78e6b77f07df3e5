"""torchvision's ResNet-18/34/50 as ``jax_impl.nn`` modules, state-dict keys equal to torchvision's.

Architecture as ``torchvision/models/resnet.py``: a 7x7/2 stem conv, BatchNorm,
ReLU, 3x3/2 max pool, four stages of BasicBlocks (18, 34) or Bottlenecks (50,
stride on the 3x3 conv: ResNet v1.5), adaptive average pool, ``fc``. Names:
``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``, ``fc``.
Init as torchvision: convs ``kaiming_normal_(mode='fan_out',
nonlinearity='relu')``, BatchNorm weight 1 and bias 0, ``fc`` torch's default
Linear init; ``zero_init_residual`` zeroes the last BatchNorm weight of
every block. To start from exactly a torch model's weights, convert them:
``parity.convert.load_torch_state_dict(model, torch_model.state_dict())``.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from jax_impl import nn
from jax_impl.nn import _channels_last as cl
from jax_impl.nn import init

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50"]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, *, rngs=None) -> nn.Conv2d:
    """3x3 convolution with padding 1, no bias."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False, rngs=rngs)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1, *, rngs=None) -> nn.Conv2d:
    """1x1 convolution, no bias."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False, rngs=rngs)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BatchNorm, ReLU and the residual sum (torchvision's ``BasicBlock``)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Sequential | None = None, *,
                 rngs=None) -> None:
        self.conv1 = conv3x3(inplanes, planes, stride, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def __call__(self, x):
        if _channels_last(self, x):
            return cl.to_nchw(self.forward_nhwc(cl.to_nhwc(x)))
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)

    def _chain(self):
        return [(self.conv1, self.bn1), (self.conv2, self.bn2)]

    def forward_nhwc(self, z):
        """The eval forward on NHWC ``z`` (``jax_impl/nn/_channels_last.py``); :meth:`__call__` picks it."""
        out = cl.conv_bn_relu(self.conv1, self.bn1, z)
        out = cl.conv_bn_relu(self.conv2, self.bn2, out, activation=False)
        identity = z if self.downsample is None else cl.conv_bn_relu(*self.downsample, z, activation=False)
        return cl.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 - 3x3 (strided) - 1x1 convs with BatchNorm, expansion 4 (torchvision's ``Bottleneck``)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Sequential | None = None, *,
                 rngs=None) -> None:
        width = planes
        self.conv1 = conv1x1(inplanes, width, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, rngs=rngs)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion, rngs=rngs)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def __call__(self, x):
        if _channels_last(self, x):
            return cl.to_nchw(self.forward_nhwc(cl.to_nhwc(x)))
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)

    def _chain(self):
        return [(self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)]

    def forward_nhwc(self, z):
        """The eval forward on NHWC ``z`` (``jax_impl/nn/_channels_last.py``); :meth:`__call__` picks it."""
        out = cl.conv_bn_relu(self.conv1, self.bn1, z)
        out = cl.conv_bn_relu(self.conv2, self.bn2, out)
        out = cl.conv_bn_relu(self.conv3, self.bn3, out, activation=False)
        identity = z if self.downsample is None else cl.conv_bn_relu(*self.downsample, z, activation=False)
        return cl.relu(out + identity)


def _plain(module, cls) -> bool:
    """``module`` is a ``cls`` whose call is ``cls``'s own: the channels-last path computes what that call
    does, so a replaced or subclassed layer (another activation, a conv with its own ``__call__``) keeps
    the module-by-module path."""
    return isinstance(module, cls) and type(module).__call__ is cls.__call__


def _chain_ok(chain, x) -> tuple[int, ...] | None:
    """The output shape of ``(conv, bn)`` pairs applied in turn to ``x``, or ``None`` if one cannot run
    channels-last."""
    shape = tuple(x.shape)
    for conv, bn in chain:
        shape = cl.conv_shape(conv, shape, x.dtype) if _plain(conv, nn.Conv2d) else None
        if shape is None or not _plain(bn, nn.BatchNorm2d) or not cl.batch_norm_ok(bn):
            return None
    return shape


def _channels_last(block, x) -> bool:
    """Run ``block`` channels-last: eval mode on XLA:CPU, every conv on Eigen's route (``_channels_last``)."""
    if block.training or not cl.usable(x) or not _plain(block.relu, nn.ReLU):
        return False
    if _chain_ok(block._chain(), x) is None:
        return False
    ds = block.downsample
    if ds is None:
        return True
    return _plain(ds, nn.Sequential) and len(ds) == 2 and _chain_ok([(ds[0], ds[1])], x) is not None


class ResNet(nn.Module):
    """torchvision's ``ResNet(block, layers, num_classes, zero_init_residual)`` on NCHW input.

    Args:
      block: :class:`BasicBlock` or :class:`Bottleneck`.
      layers: blocks per stage.
      num_classes: outputs of ``fc``.
      zero_init_residual: zero the last BatchNorm weight of each block.
      rngs: init keys; ``None`` draws from the global generator
        (``jax_impl.random.manual_seed``).
    """

    def __init__(self, block, layers, num_classes: int = 1000, zero_init_residual: bool = False, *,
                 rngs: nnx.Rngs | None = None) -> None:
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False, rngs=rngs)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0], rngs=rngs)
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, rngs=rngs)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, rngs=rngs)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, rngs=rngs)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes, rngs=rngs)

        key = None if rngs is None else rngs.params
        for _, m in nnx.iter_modules(self):
            if isinstance(m, nn.Conv2d):
                m.weight[...] = init.kaiming_normal_(
                    None if key is None else key(), m.weight.shape, m.weight.dtype, mode="fan_out",
                    nonlinearity="relu",
                )
        if zero_init_residual:
            for _, m in nnx.iter_modules(self):
                last = m.bn3 if isinstance(m, Bottleneck) else m.bn2 if isinstance(m, BasicBlock) else None
                if last is not None:
                    last.weight[...] = jnp.zeros_like(last.weight[...])

    def _stem_channels_last(self, x) -> bool:
        if (self.training or not cl.usable(x) or not _plain(self.maxpool, nn.MaxPool2d)
                or not _plain(self.relu, nn.ReLU)):
            return False
        shape = _chain_ok([(self.conv1, self.bn1)], x)
        return shape is not None and cl.pool_ok(self.maxpool, shape)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1, *, rngs=None) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride, rngs=rngs),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, rngs=rngs)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, rngs=rngs))
        return nn.Sequential(*layers)

    def __call__(self, x):
        if self._stem_channels_last(x):
            z = cl.conv_bn_relu(self.conv1, self.bn1, cl.to_nhwc(x))
            x = cl.to_nchw(cl.max_pool2d(self.maxpool, z))  # the next block's transpose cancels this one
        else:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.avgpool(x)
        return self.fc(x.reshape(x.shape[0], -1))


def resnet18(num_classes: int = 1000, *, rngs: nnx.Rngs | None = None, **kwargs) -> ResNet:
    """torchvision ``resnet18(weights=None)``: BasicBlock, [2, 2, 2, 2]."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, rngs=rngs, **kwargs)


def resnet34(num_classes: int = 1000, *, rngs: nnx.Rngs | None = None, **kwargs) -> ResNet:
    """torchvision ``resnet34(weights=None)``: BasicBlock, [3, 4, 6, 3]."""
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes, rngs=rngs, **kwargs)


def resnet50(num_classes: int = 1000, *, rngs: nnx.Rngs | None = None, **kwargs) -> ResNet:
    """torchvision ``resnet50(weights=None)``: Bottleneck, [3, 4, 6, 3]."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, rngs=rngs, **kwargs)
