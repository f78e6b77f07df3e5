"""The ``precision`` jax_impl's float32 products ask XLA for: full float32, or TF32 where torch's switches allow it.

``Precision.HIGHEST`` keeps float32 products in float32 on every backend
(XLA's default on NVIDIA GPUs rounds operands to TF32). Off the CPU,
``jax_impl.backends.cudnn.allow_tf32`` (convolutions) and
``jax_impl.backends.cuda.matmul.allow_tf32`` (GEMMs) switch float32
products to XLA's default precision, as torch's switches of the same names
let cuDNN and cuBLAS use TF32. Read while tracing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.backends import cuda, cudnn

__all__ = ["conv", "matmul"]


def _tf32(allowed: bool, dtype) -> lax.Precision:
    if allowed and jnp.dtype(dtype) == jnp.float32 and jax.default_backend() != "cpu":
        return lax.Precision.DEFAULT
    return lax.Precision.HIGHEST


def conv(dtype) -> lax.Precision:
    """The precision of a convolution on ``dtype`` operands."""
    return _tf32(cudnn.allow_tf32, dtype)


def matmul(dtype) -> lax.Precision:
    """The precision of a GEMM on ``dtype`` operands."""
    return _tf32(cuda.matmul.allow_tf32, dtype)
