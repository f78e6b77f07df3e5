"""Build the JAX twin of a torch optimizer from the same config section.

``build_jax_optimizer({"name": "Adam", "lr": 1e-3})`` is
``jax_impl.optim.adam(lr=1e-3)``, the counterpart of
``torch_ref.optim.build_optimizer`` with the same section.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

import jax_impl.optim
from jax_impl.optim import TorchTransformation
from torch_ref.optim import optimizer_class, optimizer_spec

__all__ = ["build_jax_optimizer", "jax_optimizer_factory", "param_group_members"]


# jax_impl has them, with torch's closure protocol, but a runner's step hands over gradients only.
_CLOSURE_OPTIMIZERS = frozenset({"LBFGS"})


def jax_optimizer_factory(name: str) -> Any:
    """``jax_impl.optim.<name.lower()>`` for the torch optimizer class ``name``.

    Raises:
      ValueError: ``name`` is not a ``torch.optim`` optimizer.
      NotImplementedError: torch has it, ``jax_impl.optim`` does not (e.g. ``SparseAdam``), or it steps with
        a closure (``LBFGS``), which the runners do not drive.
    """
    optimizer_class(name)  # ValueError for names torch does not have
    if name == "SparseAdam":
        raise NotImplementedError("torch.optim.SparseAdam steps on sparse gradients (nn.Embedding(sparse=True)), "
                                  "which parity run's training step does not produce: use "
                                  "jax_impl.optim.sparseadam with SparseGrad in your own loop")
    if name in _CLOSURE_OPTIMIZERS:
        raise NotImplementedError(f"torch.optim.{name} steps with a closure (several loss evaluations per step), "
                                  f"which parity run's training step does not drive: use jax_impl.optim."
                                  f"{name.lower()}(...).step(closure, state, params) in your own loop")
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


def param_group_members(section: Any, names: Sequence[str]) -> list[tuple[dict[str, Any], list[str]]]:
    """torch's param groups for a config section, as ``(overrides, member names)`` per group.

    Both frameworks build their groups from this one list, so group ``i`` is
    the same parameters on both sides (torch numbers its optimizer state by
    the order of ``param_groups[*]["params"]``, which follows ``names``).

    Args:
      section: an optimizer config section; its ``param_groups`` (globs and
        overrides, see ``parity.config.schema.OptimizerConfig``) may be empty.
      names: the parameter names, in ``named_parameters()`` order.

    Returns:
      Group 0: the parameters no listed group matches, with no overrides
      (left out when empty); then one entry per listed group, in order.

    Raises:
      ValueError: a parameter matches two groups (torch's "some parameters
        appear in more than one parameter group"), or a group matches none.
    """
    groups = getattr(section, "param_groups", ()) or ()
    if not groups:
        return [({}, list(names))]
    members: list[list[str]] = [[] for _ in groups]
    rest: list[str] = []
    for name in names:
        hits = [i for i, group in enumerate(groups) if any(fnmatch.fnmatchcase(name, g) for g in group.params)]
        if len(hits) > 1:
            raise ValueError(f"some parameters appear in more than one parameter group: {name!r} "
                             f"(optimizer.param_groups {hits})")
        (members[hits[0]] if hits else rest).append(name)
    for i, (group, found) in enumerate(zip(groups, members, strict=True)):
        if not found:
            raise ValueError(f"optimizer.param_groups[{i}] ({', '.join(group.params)}) matches no parameter; "
                             f"the names are like {', '.join(names[:4])}")
    head = [({}, rest)] if rest else []
    return head + [(dict(group.overrides), found) for group, found in zip(groups, members, strict=True)]
