"""torch.nn counterparts: ``jax_impl.nn.init`` mirrors ``torch.nn.init``."""

from jax_impl.nn import init
