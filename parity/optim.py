"""Build the JAX twin of a torch optimizer from the same config section.

``build_jax_optimizer({"name": "Adam", "lr": 1e-3})`` is
``jax_impl.optim.adam(lr=1e-3)``, the counterpart of
``torch_ref.optim.build_optimizer`` with the same section.
"""

from __future__ import annotations

from typing import Any

import jax_impl.optim
from jax_impl.optim import TorchTransformation
from torch_ref.optim import optimizer_class, optimizer_spec

__all__ = ["build_jax_optimizer", "jax_optimizer_factory"]


def jax_optimizer_factory(name: str) -> Any:
    """``jax_impl.optim.<name.lower()>`` for the torch optimizer class ``name``.

    Raises:
      ValueError: ``name`` is not a ``torch.optim`` optimizer.
      NotImplementedError: torch has it, ``jax_impl.optim`` does not (e.g. ``SparseAdam``).
    """
    optimizer_class(name)  # ValueError for names torch does not have
    factory = getattr(jax_impl.optim, name.lower(), None)
    if factory is None or name.lower() not in jax_impl.optim.__all__ or isinstance(factory, type):
        raise NotImplementedError(f"torch.optim.{name} has no jax_impl.optim counterpart ({name.lower()!r} is missing)")
    return factory


def build_jax_optimizer(section: Any) -> TorchTransformation:
    """``jax_impl.optim.<name.lower()>(**kwargs)`` from a config section.

    Args:
      section: ``parity.config.OptimizerConfig`` or ``{"name": "Adam", "lr": ...}``,
        with torch's keyword arguments (YAML lists become tuples).

    Returns:
      The transformation reproducing ``torch.optim.<name>(params, **kwargs)``.

    Raises:
      ValueError: unknown optimizer name, or invalid hyperparameters (as torch).
      NotImplementedError: an optimizer (or option) ``jax_impl.optim`` lacks.
    """
    name, kwargs = optimizer_spec(section)
    return jax_optimizer_factory(name)(**kwargs)
