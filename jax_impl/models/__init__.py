"""Models built from ``jax_impl.nn``, twins of ``torch_ref.models`` (torchvision's names and keys)."""

from jax_impl.models.lenet import LeNet
from jax_impl.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet34, resnet50

__all__ = ["BasicBlock", "Bottleneck", "LeNet", "ResNet", "resnet18", "resnet34", "resnet50"]
