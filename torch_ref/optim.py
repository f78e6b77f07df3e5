"""Build ``torch.optim`` optimizers from a config section.

The reference side never reimplements an optimizer: :func:`build_optimizer`
looks the class up on ``torch.optim`` and calls it. This module does not
import ``parity`` or JAX; a config section is read by duck typing (anything
with ``.name`` and ``.kwargs``, such as ``parity.config.OptimizerConfig``, or a
plain mapping ``{"name": "Adam", "lr": 1e-3, ...}``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["as_tuples", "build_optimizer", "optimizer_class", "optimizer_spec"]


def as_tuples(value: Any) -> Any:
    """YAML has no tuples: ``betas: [0.9, 0.99]`` arrives as a list; torch expects a tuple."""
    if isinstance(value, list):
        return tuple(as_tuples(v) for v in value)
    return value


def optimizer_spec(section: Any) -> tuple[str, dict[str, Any]]:
    """Splits an optimizer section into ``(torch class name, keyword arguments)``.

    Args:
      section: an object with ``.name`` and ``.kwargs`` (``OptimizerConfig``),
        or a mapping ``{"name": ..., **kwargs}``. Lists become tuples.

    Raises:
      ValueError: the section has no ``name``.
    """
    if isinstance(section, Mapping):
        kwargs = dict(section)
        name = kwargs.pop("name", None)
    else:
        name = getattr(section, "name", None)
        kwargs = dict(getattr(section, "kwargs", {}) or {})
    if not isinstance(name, str) or not name:
        raise ValueError(f"an optimizer section needs a 'name' (a torch.optim class), got {section!r}")
    return name, {key: as_tuples(value) for key, value in kwargs.items()}


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """``torch.optim.<name>``, checked to be an optimizer class.

    Raises:
      ValueError: ``name`` is not a ``torch.optim.Optimizer`` subclass.
    """
    cls = getattr(torch.optim, name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer):
        raise ValueError(f"unknown optimizer {name!r}: not a torch.optim optimizer class")
    return cls


def build_optimizer(section: Any, params: Iterable[Any] | torch.nn.Module) -> torch.optim.Optimizer:
    """``torch.optim.<name>(params, **kwargs)`` from a config section.

    Args:
      section: ``parity.config.OptimizerConfig`` or ``{"name": "Adam", "lr": ...}``.
        Keyword arguments are torch's own (unknown ones raise torch's ``TypeError``).
      params: what torch accepts (tensors or param-group dicts), or an
        ``nn.Module`` whose ``parameters()`` are used.

    Returns:
      The real torch optimizer.

    Raises:
      ValueError: the name is not a ``torch.optim`` optimizer.
    """
    name, kwargs = optimizer_spec(section)
    cls = optimizer_class(name)
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    return cls(params, **kwargs)
