"""scikit-learn's bundled 8x8 digits upscaled to MNIST's 28x28, as a user data set for ``parity run``.

``configs/mnist_example.yaml`` names :func:`load` as ``data.dataset.arrays``:
both frameworks read these arrays, so the MNIST example's network runs
unchanged on offline data.
"""

from __future__ import annotations

import numpy as np


def load(train: bool = True, val_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 1, 28, 28) float32, normalised as the MNIST example's Normalize((0.1307,), (0.3081,)),
    labels (N,) int64)``: the training split (``train=True``) or the held-out one."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0  # ToTensor's [0, 1]
    index = (np.arange(28) * 8) // 28  # nearest-neighbour upscaling, 8 -> 28 pixels
    images = images[:, index][:, :, index][:, None]
    images = (images - 0.1307) / 0.3081
    order = np.random.default_rng(seed).permutation(len(images))
    cut = int(len(images) * (1 - val_fraction))
    chosen = order[:cut] if train else order[cut:]
    return images[chosen], digits.target[chosen].astype(np.int64)
