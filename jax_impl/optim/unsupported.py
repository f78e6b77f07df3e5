"""torch optimizers that are not reproduced: each raises ``NotImplementedError`` naming itself."""

from __future__ import annotations

from typing import Any

__all__ = ["sparseadam", "adafactor", "muon"]


def sparseadam(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.SparseAdam`` needs sparse gradients, which JAX has not."""
    raise NotImplementedError("torch.optim.SparseAdam (sparse gradients) is not supported by jax_impl.optim")


def adafactor(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.Adafactor`` has not been ported."""
    raise NotImplementedError("torch.optim.Adafactor is not supported by jax_impl.optim yet")


def muon(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.Muon`` has not been ported."""
    raise NotImplementedError("torch.optim.Muon is not supported by jax_impl.optim yet")
