"""A bundled text as next-character prediction windows, a user data set for ``parity run`` (``configs/char_gpt.yaml``).

The text is ``examples/data/tiny_text.txt`` (a few KB, written for this
project; no download). Characters map to a fixed vocabulary of 96 ids:
printable ASCII ``' '`` to ``'~'`` as ``ord(c) - 32``, and the newline as 95,
so the model's ``vocab_size`` does not depend on the text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TEXT = Path(__file__).resolve().parent / "data" / "tiny_text.txt"
VOCAB_SIZE = 96


def encode(text: str) -> np.ndarray:
    """The ids of ``text`` (int64); a character outside the vocabulary raises ``ValueError`` naming it."""
    codes = np.frombuffer(text.encode("ascii", errors="strict"), np.uint8).astype(np.int64)
    ids = np.where(codes == ord("\n"), VOCAB_SIZE - 1, codes - 32)
    bad = (ids < 0) | (ids >= VOCAB_SIZE)
    if bad.any():
        raise ValueError(f"character {chr(codes[bad][0])!r} is outside the vocabulary")
    return ids


def decode(ids: np.ndarray) -> str:
    """The text of ``ids`` (inverse of :func:`encode`)."""
    return "".join("\n" if i == VOCAB_SIZE - 1 else chr(int(i) + 32) for i in np.asarray(ids).reshape(-1))


def load(train: bool = True, block_size: int = 32, stride: int | None = None,
         val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs (N, block_size) int64, targets (N, block_size) int64)``: windows of the text, each target
    the next character of its input.

    The first ``1 - val_fraction`` of the text gives the training windows
    (``train=True``), the rest the held-out ones, so no held-out character is
    trained on. Windows start every ``stride`` characters (default
    ``block_size``: no overlap).
    """
    ids = encode(TEXT.read_text(encoding="ascii"))
    stride = stride or block_size
    cut = int(len(ids) * (1 - val_fraction))
    part = ids[:cut] if train else ids[cut:]
    starts = np.arange(0, len(part) - block_size, stride)
    inputs = np.stack([part[s:s + block_size] for s in starts])
    targets = np.stack([part[s + 1:s + block_size + 1] for s in starts])
    return inputs, targets
