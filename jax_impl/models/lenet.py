"""LeNet-5 (ReLU, max pooling) as ``jax_impl.nn`` modules, twin of ``torch_ref.models.LeNet``."""

from __future__ import annotations

from flax import nnx

from jax_impl import nn
from jax_impl.models.geometry import lenet_geometry

__all__ = ["LeNet", "lenet_geometry"]


class LeNet(nn.Module):
    """conv-pool-conv-pool-fc(120)-fc(84)-fc(num_classes) with ReLU; torch's module names and init.

    Args:
      num_classes: outputs of the last layer.
      in_channels: 3 for 3x32x32 images, 1 for the 1x8x8 digits.
      image_size: input height = width (see :func:`jax_impl.models.geometry.lenet_geometry`).
      rngs: init keys; ``None`` draws torch's numbers from the global
        generator (``jax_impl.random.manual_seed``), matching
        ``torch_ref.models.LeNet`` built after the same ``torch.manual_seed``.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 8, *,
                 rngs: nnx.Rngs | None = None) -> None:
        kernel, padding, size = lenet_geometry(image_size)
        self.conv1 = nn.Conv2d(in_channels, 6, kernel, padding=padding, rngs=rngs)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, kernel, padding=padding, rngs=rngs)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(16 * size * size, 120, rngs=rngs)
        self.fc2 = nn.Linear(120, 84, rngs=rngs)
        self.fc3 = nn.Linear(84, num_classes, rngs=rngs)

    def __call__(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)
