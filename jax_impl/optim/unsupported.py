"""torch optimizers that are not reproduced: each raises ``NotImplementedError`` naming itself."""

from __future__ import annotations

from typing import Any

__all__ = ["muon"]


def muon(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.Muon`` has not been ported."""
    raise NotImplementedError("torch.optim.Muon is not supported by jax_impl.optim yet")
