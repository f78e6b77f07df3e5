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
from parity.config.schema import ExperimentConfig
from torch_ref.optim import optimizer_class, optimizer_spec

__all__ = ["CLOSURE_OPTIMIZERS", "build_jax_optimizer", "check_gradients_fit", "jax_optimizer_factory",
           "param_group_members"]


# They step with torch's closure protocol (``optimizer.step(closure)``, several loss evaluations per step):
# ``parity run`` drives them with the closure step of both frameworks (torch_step / jax_impl.train). The
# config check (one batch per step, no clipping) reads the same set.
CLOSURE_OPTIMIZERS = ExperimentConfig.CLOSURE_OPTIMIZERS

# torch's message for a dense gradient (torch/optim/sparse_adam.py).
_SPARSE_ADAM_DENSE = "SparseAdam does not support dense gradients, please consider Adam instead"


def jax_optimizer_factory(name: str) -> Any:
    """``jax_impl.optim.<name.lower()>`` for the torch optimizer class ``name``.

    Raises:
      ValueError: ``name`` is not a ``torch.optim`` optimizer.
      NotImplementedError: torch has it, ``jax_impl.optim`` does not.
    """
    optimizer_class(name)  # ValueError for names torch does not have
    factory = getattr(jax_impl.optim, name.lower(), None)
    if factory is None or name.lower() not in jax_impl.optim.__all__ or isinstance(factory, type):
        raise NotImplementedError(f"torch.optim.{name} has no jax_impl.optim counterpart ({name.lower()!r} is missing)")
    return factory


def check_gradients_fit(name: str, torch_model: Any) -> None:
    """Refuses an optimizer the gradients of ``parity run``'s training step cannot feed.

    ``SparseAdam`` steps on sparse gradients only. A model without
    ``nn.Embedding(sparse=True)`` gives dense ones, on which torch's first
    ``step()`` raises: that error is raised here, before anything runs. A
    model with sparse embeddings is refused as well, since the JAX train step
    differentiates densely (``jax_impl.optim.sparseadam`` takes the
    ``SparseGrad`` of ``jax_impl.optim.sparse_adam.embedding_sparse_grad`` in
    your own loop).

    Raises:
      RuntimeError: torch's dense-gradient error.
      NotImplementedError: sparse gradients in ``parity run``.
    """
    if name != "SparseAdam":
        return
    import torch

    sparse = [n for n, m in torch_model.named_modules()
              if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse]
    if not sparse:
        raise RuntimeError(_SPARSE_ADAM_DENSE)
    raise NotImplementedError(f"sparse gradients in parity run (nn.Embedding(sparse=True) at {', '.join(sparse)}): "
                              "the JAX train step differentiates densely; use jax_impl.optim.sparseadam with "
                              "jax_impl.optim.sparse_adam.embedding_sparse_grad in your own loop")


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
