"""``torch.backends.cuda``: whether float32 matrix products on a GPU may use TF32.

``torch.backends.cuda.matmul.allow_tf32`` (torch's default ``False``) lets
cuBLAS round float32 GEMM operands to TF32 (10-bit mantissa) on tensor
cores. jax_impl's ``linear``, ``matmul`` and attention products ask XLA for
``Precision.HIGHEST`` (full float32, the parity setting) unless
:data:`matmul.allow_tf32 <Matmul.allow_tf32>` is ``True``; then a float32
product gets XLA's default precision, which is TF32 on NVIDIA GPUs from
Ampere on, unless ``jax_default_matmul_precision`` is set (``parity`` sets
it to ``"highest"`` for its runs). It acts where jax's default backend is a
GPU and changes nothing on the CPU. It is read when a function is traced, so
a jitted function keeps the precision it was traced with.

Example::

    from jax_impl.backends import cuda

    cuda.matmul.allow_tf32 = True  # as torch.backends.cuda.matmul.allow_tf32 = True
"""

from __future__ import annotations

__all__ = ["Matmul", "matmul"]


class Matmul:
    """``torch.backends.cuda.matmul``: the TF32 switch of float32 GEMMs."""

    allow_tf32: bool = False
    """Whether float32 GEMMs on a GPU may round their operands to TF32 (torch's default: ``False``)."""


matmul = Matmul()
