"""The CPU a test runs on, where a claim depends on it.

jax_impl's oneDNN routes (``jax_impl/_onednn.py``) load the ``onednn-cpu-gomp`` wheel's library, another
oneDNN build than the one inside torch. On CPUs with AVX-512 both pick the same kernels for the shapes the
tests use, and the results are torch's bit for bit; on AVX2-only CPUs the two builds pick other kernels in
places (torch's ``jit:avx2`` convolution adds its bias in the kernel's accumulator, its bf16 convolutions
convert in other places, its LSTM GEMMs block differently), and the results agree to float32 rounding only.
Tests assert bit-equality where ``AVX512`` holds and their tolerance bound everywhere.
"""

from __future__ import annotations

import torch

__all__ = ["AVX512"]

AVX512: bool = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
