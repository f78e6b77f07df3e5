"""torch optimizers that are not reproduced: each raises ``NotImplementedError`` naming itself."""

from __future__ import annotations

from typing import Any

__all__ = ["lbfgs", "sparseadam", "adafactor", "muon"]


def lbfgs(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``.

    torch's LBFGS runs up to ``max_iter`` closure evaluations per ``step()``
    with data-dependent early exits (tolerances, the ``ys > 1e-10`` history
    skip, an optional strong-Wolfe line search); it does not fit the
    ``init``/``update`` shape of an optax transformation, and no honest parity
    with it has been built here.
    """
    raise NotImplementedError("torch.optim.LBFGS (closure-based, multi-evaluation steps) is not supported by jax_impl.optim")


def sparseadam(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.SparseAdam`` needs sparse gradients, which JAX has not."""
    raise NotImplementedError("torch.optim.SparseAdam (sparse gradients) is not supported by jax_impl.optim")


def adafactor(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.Adafactor`` has not been ported."""
    raise NotImplementedError("torch.optim.Adafactor is not supported by jax_impl.optim yet")


def muon(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``: ``torch.optim.Muon`` has not been ported."""
    raise NotImplementedError("torch.optim.Muon is not supported by jax_impl.optim yet")
