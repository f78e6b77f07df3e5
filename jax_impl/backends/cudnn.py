"""``torch.backends.cudnn``: whether float32 convolutions on a GPU may use TF32.

``torch.backends.cudnn.allow_tf32`` lets cuDNN round float32 convolution
operands to TF32 (10-bit mantissa) on tensor cores; torch's default is
``True``. jax_impl's default is ``False``: its convolutions ask XLA for
``Precision.HIGHEST`` (full float32), the setting its parity checks against
torch run with (``parity`` turns torch's switch off). Set
:data:`allow_tf32` to ``True`` for torch's default speed on a GPU: a
float32 convolution then gets XLA's default precision, TF32 on
NVIDIA GPUs from Ampere on, unless ``jax_default_matmul_precision`` is set
(``parity`` sets it to ``"highest"`` for its runs). It acts where jax's
default backend is a GPU and changes nothing on the CPU. It is read when a
function is traced, so a jitted function keeps the precision it was traced
with.

Example::

    from jax_impl.backends import cudnn

    with cudnn.flags(allow_tf32=True):
        ...  # convolutions traced here may use TF32 on a GPU
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jax_impl.backends import switches

__all__ = ["allow_tf32", "flags"]

allow_tf32: bool = False
"""Whether float32 convolutions on a GPU may round their operands to TF32 (torch's default: ``True``)."""


@contextlib.contextmanager
def flags(allow_tf32: bool = True) -> Iterator[None]:
    """Set :data:`allow_tf32` inside a ``with`` block (``torch.backends.cudnn.flags``'s ``allow_tf32``, whose
    default, ``True``, this keeps)."""
    with switches.set_within(globals(), "allow_tf32", bool(allow_tf32)):
        yield
