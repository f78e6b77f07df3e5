"""The ``precision`` jax_impl's float32 products ask XLA for: full float32, or TF32 where torch's switches allow it.

``Precision.HIGHEST`` keeps float32 products in float32 on every backend
(XLA's default on NVIDIA GPUs rounds operands to TF32). Where jax's default
backend is a GPU, ``jax_impl.backends.cudnn.allow_tf32`` (convolutions) and
``jax_impl.backends.cuda.matmul.allow_tf32`` (GEMMs) leave a float32
product's precision unset (``None``), as torch's switches of the same names
let cuDNN and cuBLAS use TF32: XLA's default then applies (TF32 on NVIDIA
GPUs from Ampere on) unless ``jax_default_matmul_precision`` says otherwise,
so ``parity``'s numerics context, which sets it to ``"highest"``, keeps
parity runs at full float32 with the switches on. Read while tracing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax_impl.backends import cuda, cudnn

__all__ = ["conv", "matmul"]


def _tf32(allowed: bool, dtype) -> lax.Precision | None:
    # The GPU only: a TPU's default precision is one bf16 pass, not TF32.
    if allowed and jnp.dtype(dtype) == jnp.float32 and jax.default_backend() == "gpu":
        return None
    return lax.Precision.HIGHEST


def conv(dtype) -> lax.Precision | None:
    """The precision of a convolution on ``dtype`` operands."""
    return _tf32(cudnn.allow_tf32, dtype)


def matmul(dtype) -> lax.Precision | None:
    """The precision of a GEMM on ``dtype`` operands."""
    return _tf32(cuda.matmul.allow_tf32, dtype)
