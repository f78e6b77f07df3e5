"""torch's ``param_groups``: different hyperparameters for different parts of the tree.

torch::

    torch.optim.SGD(
        [{"params": backbone_params},
         {"params": head_params, "lr": 1e-2},
         {"params": norm_and_bias_params, "weight_decay": 0.0}],
        lr=1e-3, momentum=0.9, weight_decay=5e-4)

here::

    tx = jax_impl.optim.param_groups(
        jax_impl.optim.sgd,
        [{"params": "backbone.*"},
         {"params": "head.*", "lr": 1e-2},
         {"params": lambda path, p: p.ndim == 1, "weight_decay": 0.0}],
        lr=1e-3, momentum=0.9, weight_decay=5e-4)

Each group's optimizer is ``optimizer(**{**defaults, **group})``, exactly the
per-group hyperparameters torch computes, and each parameter is updated by
its group alone, as in torch. A group's ``params`` selects leaves by dotted
key path (``layer1.0.conv1.weight``, torch's ``state_dict`` spelling): a glob
pattern, a list of patterns or exact paths, or a predicate ``(path, leaf) ->
bool``. Alternatively ``labels=`` gives a pytree like the params holding each
leaf's group index. A leaf selected by two groups raises ``ValueError``
(torch: "some parameters appear in more than one parameter group"); a leaf
selected by none is not optimized (torch only updates the parameters it was
given), unless ``strict=True``, which raises instead.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax

from jax_impl.optim._base import TorchTransformation

__all__ = ["param_groups", "ParamGroupsState", "key_path"]

Selector = str | Sequence[str] | Callable[[str, Any], bool]


class ParamGroupsState(NamedTuple):
    """One inner optimizer state per group, each over the list of that group's leaves."""

    groups: tuple[Any, ...]


def key_path(path: Sequence[Any]) -> str:
    """Dotted key path of a ``jax.tree_util`` path: ``layer1.0.conv1.weight``.

    The ``.value`` attribute that ``flax.nnx`` variables add to the path of an
    ``nnx.state(model, nnx.Param)`` leaf is left out, so the spelling is
    torch's ``state_dict`` key.
    """
    path = list(path)
    if path and isinstance(path[-1], jax.tree_util.GetAttrKey) and path[-1].name == "value":
        path = path[:-1]
    parts = []
    for entry in path:
        for attr in ("key", "idx", "name"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def _matches(selector: Selector, path: str, leaf: Any) -> bool:
    if callable(selector):
        return bool(selector(path, leaf))
    patterns = [selector] if isinstance(selector, str) else list(selector)
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def param_groups(
    optimizer: Callable[..., TorchTransformation],
    groups: Sequence[Mapping[str, Any]],
    *,
    labels: Any = None,
    strict: bool = False,
    **defaults: Any,
) -> TorchTransformation:
    """Builds ``optimizer`` with torch-style parameter groups.

    Args:
      optimizer: a ``jax_impl.optim`` factory, e.g. ``jax_impl.optim.adamw``.
      groups: one mapping per group: ``"params"`` (selector; omit it when
        ``labels`` is given) plus the hyperparameters this group overrides.
      labels: optional pytree like the params whose leaves are group indices.
      strict: raise if a leaf belongs to no group (torch silently leaves it).
      **defaults: hyperparameters shared by all groups (torch's constructor
        keywords).

    Returns:
      A transformation with ``init``, ``update`` and the exact ``step``.
    """
    if not groups:
        raise ValueError("optimizer got an empty parameter list")
    transforms = []
    for index, group in enumerate(groups):
        if labels is None and "params" not in group:
            raise ValueError(f"parameter group {index} didn't specify a value of required optimization parameter params")
        hyper = {**defaults, **{k: v for k, v in group.items() if k != "params"}}
        transforms.append(optimizer(**hyper))

    def assign(params: Any) -> list[int | None]:
        leaves_with_path = jax.tree_util.tree_flatten_with_path(params)[0]
        if labels is not None:
            label_leaves = jax.tree.structure(params).flatten_up_to(labels)
            for (path, _), label in zip(leaves_with_path, label_leaves):
                if label is not None and not 0 <= int(label) < len(groups):
                    raise ValueError(f"{key_path(path)}: label {label} is not a group index (0..{len(groups) - 1})")
            assignment = [None if label is None else int(label) for label in label_leaves]
        else:
            assignment = []
            for path, leaf in leaves_with_path:
                name = key_path(path)
                hits = [i for i, group in enumerate(groups) if _matches(group["params"], name, leaf)]
                if len(hits) > 1:
                    raise ValueError(f"some parameters appear in more than one parameter group: {name} (groups {hits})")
                assignment.append(hits[0] if hits else None)
        if strict:
            missing = [key_path(p) for (p, _), a in zip(leaves_with_path, assignment) if a is None]
            if missing:
                raise ValueError(f"parameters in no group: {', '.join(missing)}")
        return assignment

    def split(tree: Any, assignment: list[int | None]) -> list[list[Any]]:
        leaves = jax.tree.leaves(tree)
        return [[leaf for leaf, a in zip(leaves, assignment) if a == i] for i in range(len(groups))]

    def init(params: Any) -> ParamGroupsState:
        assignment = assign(params)
        parts = split(params, assignment)
        return ParamGroupsState(tuple(tx.init(part) for tx, part in zip(transforms, parts)))

    def step(grads: Any, state: ParamGroupsState, params: Any) -> tuple[Any, ParamGroupsState]:
        assignment = assign(params)
        grad_parts = split(grads, assignment)
        param_parts = split(params, assignment)
        new_states = []
        new_parts = []
        for tx, g, p, s in zip(transforms, grad_parts, param_parts, state.groups):
            new_p, new_s = tx.step(g, s, p)
            new_parts.append(iter(new_p))
            new_states.append(new_s)
        leaves, treedef = jax.tree.flatten(params)
        merged = [leaf if a is None else next(new_parts[a]) for leaf, a in zip(leaves, assignment)]
        return treedef.unflatten(merged), ParamGroupsState(tuple(new_states))

    def update(updates: Any, state: ParamGroupsState, params: Any = None, **extra_args: Any) -> tuple[Any, ParamGroupsState]:
        del extra_args
        if params is None:
            raise ValueError("torch optimizers update parameters in place: pass params to update()")
        new_params, new_state = step(updates, state, params)
        return jax.tree.map(lambda n, p: n - p, new_params, params), new_state

    return TorchTransformation(init, update, step)
