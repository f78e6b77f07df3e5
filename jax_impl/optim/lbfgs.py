"""``torch.optim.LBFGS`` is not reproduced."""

from __future__ import annotations

from typing import Any

__all__ = ["lbfgs"]


def lbfgs(*args: Any, **kwargs: Any) -> Any:
    """Raises ``NotImplementedError``.

    torch's LBFGS runs up to ``max_iter`` closure evaluations per ``step()``
    with data-dependent early exits (tolerances, the ``ys > 1e-10`` history
    skip, an optional strong-Wolfe line search); it does not fit the
    ``init``/``update`` shape of an optax transformation, and no honest parity
    with it has been built here.
    """
    raise NotImplementedError("torch.optim.LBFGS (closure-based, multi-evaluation steps) is not supported by jax_impl.optim")
