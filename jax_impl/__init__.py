"""torch's training semantics reimplemented on jax, flax.nnx and optax.

Names mirror torch's namespaces (``jax_impl.optim``, ``jax_impl.nn``,
``jax_impl.data``, ``jax_impl.parallel``, ``jax_impl.models``). Under them
sits a base layer the three siblings share: ``jax_impl.random`` (torch's
generator) and ``jax_impl.kernels`` (torch's elementwise roundings). This
package never imports torch: it works where torch is not installed.
Importing it does not import jax either: ``torch_ref`` uses its
pure-Python pieces (LeNet's geometry, the digits arrays, the process
launcher) in processes where jax never starts.
"""

from jax_impl._malloc import tune_malloc as _tune_malloc
from jax_impl._xla_cpu import configure_cpu as _configure_cpu

__version__ = "0.1.0"

# Switch XLA:CPU's YNNPACK convolutions off before jax's backend starts (see jax_impl/_xla_cpu.py).
_configure_cpu()
# Keep a step's freed buffers in the heap for the next step instead of returning them to the kernel
# (see jax_impl/_malloc.py; JAX_IMPL_MALLOC_TUNING=0 keeps glibc's defaults).
_tune_malloc()
