"""The models' layer sizes, in pure Python: ``torch_ref.models`` builds its twins from the same numbers."""

from __future__ import annotations

__all__ = ["lenet_geometry"]


def lenet_geometry(image_size: int) -> tuple[int, int, int]:
    """``(kernel, padding, final feature size)`` of LeNet's two conv+pool stages.

    From 28x28 up LeNet-5's 5x5 valid convolutions (32 -> 28 -> 14 -> 10 -> 5);
    below, 3x3 'same' convolutions (8 -> 8 -> 4 -> 4 -> 2), sized for the 8x8
    digits.
    """
    kernel, padding = (5, 0) if image_size >= 28 else (3, 1)
    size = image_size
    for _ in range(2):
        size = (size + 2 * padding - kernel + 1) // 2
    if size < 1:
        raise ValueError(f"LeNet needs image_size >= 4, got {image_size}")
    return kernel, padding, size
