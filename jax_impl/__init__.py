"""torch's training semantics reimplemented on jax, flax.nnx and optax.

Names mirror torch's namespaces (``jax_impl.optim``, ``jax_impl.nn``,
``jax_impl.data``, ``jax_impl.parallel``, ``jax_impl.models``). This package
never imports torch: it works where torch is not installed.
"""

__version__ = "0.1.0"
