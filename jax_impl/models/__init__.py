"""Models built from ``jax_impl.nn``, twins of ``torch_ref.models`` (torchvision's names and keys).

The model classes are imported on first use, so :mod:`jax_impl.models.geometry`
(pure Python, shared with ``torch_ref``) imports without jax.
"""

from typing import TYPE_CHECKING

from jax_impl._lazy import lazy_attributes

_ORIGINS = {
    "LeNet": "jax_impl.models.lenet",
    **dict.fromkeys(("BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50"), "jax_impl.models.resnet"),
    **dict.fromkeys(("VisionTransformer", "vit_tiny"), "jax_impl.models.vit"),
}
__all__ = ["BasicBlock", "Bottleneck", "LeNet", "ResNet", "VisionTransformer", "resnet18", "resnet34", "resnet50",
           "vit_tiny"]
__getattr__, __dir__ = lazy_attributes(__name__, _ORIGINS, globals())

if TYPE_CHECKING:
    from jax_impl.models.lenet import LeNet
    from jax_impl.models.resnet import BasicBlock, Bottleneck, ResNet, resnet18, resnet34, resnet50
    from jax_impl.models.vit import VisionTransformer, vit_tiny
