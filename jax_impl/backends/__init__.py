"""torch.backends counterparts: switches for the kernel libraries jax_impl can run on.

- :mod:`jax_impl.backends.mkldnn`: oneDNN's convolutions on the CPU, as
  ``torch.backends.mkldnn``;
- :mod:`jax_impl.backends.cuda` and :mod:`jax_impl.backends.cudnn`: TF32
  for float32 GEMMs and convolutions on a GPU, as ``torch.backends.cuda.matmul.allow_tf32``
  and ``torch.backends.cudnn.allow_tf32`` (both off by default here).
"""

from jax_impl.backends import cuda, cudnn, mkldnn

__all__ = ["cuda", "cudnn", "mkldnn"]
