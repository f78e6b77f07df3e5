"""Build ``torch.optim.lr_scheduler`` schedulers from a config section.

As :mod:`torch_ref.optim` does for optimizers, the reference side never
reimplements a scheduler: :func:`build_scheduler` looks the class up on
``torch.optim.lr_scheduler`` and calls it on the given optimizer. A section is
read by duck typing (``parity.config.SchedulerConfig``, or a plain mapping
``{"name": "StepLR", "step_size": 30, "interval": "epoch"}``); this module does
not import ``parity`` or JAX.

``SequentialLR`` and ``ChainedScheduler`` take their sub-schedulers as nested
sections (``schedulers: [{name: LinearLR, ...}, {name: StepLR, ...}]``); they
are built in order on the same optimizer first, as torch requires (each
sub-scheduler's constructor steps the shared ``lr``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.optim import lr_scheduler

from torch_ref.optim import as_tuples

__all__ = ["NESTED_SCHEDULERS", "build_scheduler", "scheduler_class", "scheduler_spec"]

# Schedulers whose ``schedulers`` argument holds nested sections.
NESTED_SCHEDULERS = ("SequentialLR", "ChainedScheduler")

# The section key that says how the scheduler is stepped, not a torch argument.
_INTERVAL = "interval"


def scheduler_spec(section: Any) -> tuple[str, dict[str, Any]]:
    """Splits a scheduler section into ``(torch class name, keyword arguments)``.

    Args:
      section: an object with ``.name`` and ``.kwargs`` (``SchedulerConfig``),
        or a mapping ``{"name": ..., **kwargs}``. ``interval`` is dropped; YAML
        lists become tuples, except ``schedulers`` (a list of nested sections).

    Raises:
      ValueError: the section has no ``name``.
    """
    if isinstance(section, Mapping):
        kwargs = dict(section)
        name = kwargs.pop("name", None)
        kwargs.pop(_INTERVAL, None)
    else:
        name = getattr(section, "name", None)
        kwargs = dict(getattr(section, "kwargs", {}) or {})
    if not isinstance(name, str) or not name:
        raise ValueError(f"a scheduler section needs a 'name' (a torch.optim.lr_scheduler class), got {section!r}")
    return name, {
        key: list(value) if key == "schedulers" else as_tuples(value) for key, value in kwargs.items()
    }


def scheduler_class(name: str) -> type:
    """``torch.optim.lr_scheduler.<name>``, checked to be a scheduler class.

    Raises:
      ValueError: ``name`` is not a concrete torch LR scheduler.
    """
    cls = getattr(lr_scheduler, name, None)
    bases = (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau)
    if not (isinstance(cls, type) and issubclass(cls, bases) and cls not in (lr_scheduler.LRScheduler, lr_scheduler._LRScheduler)):
        raise ValueError(f"unknown scheduler {name!r}: not a torch.optim.lr_scheduler scheduler class")
    return cls


def build_scheduler(section: Any, optimizer: torch.optim.Optimizer) -> lr_scheduler.LRScheduler:
    """``torch.optim.lr_scheduler.<name>(optimizer, **kwargs)`` from a config section.

    Args:
      section: ``parity.config.SchedulerConfig`` or ``{"name": "StepLR", ...}``,
        with torch's keyword arguments (unknown ones raise torch's ``TypeError``).
        For ``SequentialLR`` / ``ChainedScheduler``, ``schedulers`` is a list
        of such sections, built recursively on ``optimizer``.
      optimizer: the torch optimizer to schedule.

    Returns:
      The real torch scheduler.

    Raises:
      ValueError: the name is not a torch scheduler.
    """
    name, kwargs = scheduler_spec(section)
    cls = scheduler_class(name)
    if name in NESTED_SCHEDULERS:
        kwargs["schedulers"] = [build_scheduler(sub, optimizer) for sub in kwargs.get("schedulers", [])]
    if name == "ChainedScheduler":  # its optimizer argument is second and optional
        return cls(optimizer=optimizer, **kwargs)
    return cls(optimizer, **kwargs)
