"""torch.nn counterparts: ``jax_impl.nn.init`` mirrors ``torch.nn.init``, ``jax_impl.nn.functional`` ``torch.nn.functional``."""

from jax_impl.nn import functional, init

__all__ = ["functional", "init"]
