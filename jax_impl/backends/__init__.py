"""torch.backends counterparts: switches for the kernel libraries jax_impl can run on.

- :mod:`jax_impl.backends.mkldnn`: oneDNN's convolutions on the CPU, as
  ``torch.backends.mkldnn``.
"""

from jax_impl.backends import mkldnn

__all__ = ["mkldnn"]
