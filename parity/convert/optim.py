"""Optimizer state: ``torch.optim.Optimizer.state_dict()`` <-> ``jax_impl.optim`` states.

torch keeps per-parameter state in ``state_dict()["state"][i]``, ``i`` being
the parameter's position in the concatenated ``param_groups[*]["params"]``
lists; ``jax_impl.optim`` keeps a NamedTuple ``(count, *per-parameter trees,
*float32 scalars)``. The mapping between the two is one table
(:data:`_SPECS`): for each optimizer, torch's state keys in torch's insertion
order, the NamedTuple field each fills (``jax_impl`` names them alike), and when torch has the key.

torch quirks reproduced here (torch 2.13, ``torch/optim/*.py``):

- The state is empty until the first ``step()`` (``_init_group`` creates it
  lazily), except ``Adagrad``, whose ``__init__`` fills ``step = 0`` and
  ``sum = initial_accumulator_value`` eagerly.
- ``step`` is a float32 scalar tensor (float64 when torch's default dtype is
  float64, ``optimizer._get_scalar_dtype``), one per parameter.
- ``SGD`` keeps no step count and no state at all without momentum; an old
  checkpoint may hold ``momentum_buffer: None``, read as absent.
- NAdam's ``mu_product`` and ASGD's ``eta``/``mu`` are float32 scalar tensors
  per parameter; ``jax_impl`` keeps one scalar for all.
- Unused buffers (SGD/RMSprop momentum off, RMSprop not centered, Adam without
  amsgrad) are absent in torch and ``None`` at each leaf in ``jax_impl`` (no
  pytree leaves: a jitted step carries no argument for them).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from parity._tree import holds_variables, jax_key_name, to_numpy
from parity.convert.lbfgs import lbfgs_state_from_torch, lbfgs_state_to_torch
from parity.optim import jax_optimizer_factory
from torch_ref.optim import optimizer_class

__all__ = ["optimizer_state_from_torch", "optimizer_state_to_torch"]


def _nonzero(key: str) -> Callable[[Mapping[str, Any]], bool]:
    # A schedule (callable) counts as nonzero, as in jax_impl (`callable(momentum) or momentum != 0`).
    return lambda h: callable(h[key]) or h[key] != 0


def _flag(key: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda h: bool(h[key])


def _always(h: Mapping[str, Any]) -> bool:
    return True


def _any_ndim(ndim: int) -> bool:
    return True


def _matrix(ndim: int) -> bool:
    return ndim > 1


def _vector(ndim: int) -> bool:
    return ndim <= 1


@dataclasses.dataclass(frozen=True)
class _Key:
    """One torch state key (jax_impl names its NamedTuple field alike) and when torch has it."""

    torch: str
    scalar: bool = False  # a scalar tensor per param in torch, one float32 scalar in jax_impl
    used: Callable[[Mapping[str, Any]], bool] = _always
    fits: Callable[[int], bool] = _any_ndim  # by the parameter's ndim (Adafactor's factored moments)


@dataclasses.dataclass(frozen=True)
class _Spec:
    keys: tuple[_Key, ...]  # torch's insertion order, after "step"
    step: bool = True  # torch keeps state["step"]
    eager: bool = False  # torch fills the state in __init__ (Adagrad)
    int_step: bool = False  # state["step"] is a Python int, not a scalar tensor (SparseAdam)


_ADAM = _Spec((_Key("exp_avg"), _Key("exp_avg_sq"), _Key("max_exp_avg_sq", used=_flag("amsgrad"))))
_MOMENTS = _Spec((_Key("exp_avg"), _Key("exp_avg_sq")))

_SPECS: dict[str, _Spec] = {
    "SGD": _Spec((_Key("momentum_buffer", used=_nonzero("momentum")),), step=False),
    "Adam": _ADAM,
    "AdamW": _ADAM,
    "Adamax": _Spec((_Key("exp_avg"), _Key("exp_inf"))),
    "NAdam": _Spec((_Key("mu_product", scalar=True), _Key("exp_avg"), _Key("exp_avg_sq"))),
    "RAdam": _MOMENTS,
    "Adadelta": _Spec((_Key("square_avg"), _Key("acc_delta"))),
    "Adagrad": _Spec((_Key("sum"),), eager=True),
    "ASGD": _Spec((_Key("eta", scalar=True), _Key("mu", scalar=True), _Key("ax"))),
    "Rprop": _Spec((_Key("prev"), _Key("step_size"))),
    "Muon": _Spec((_Key("momentum_buffer"),), step=False),  # torch's Muon counts no steps
    # torch factors the second moment of a parameter of 2 or more dimensions into row and column variances.
    "Adafactor": _Spec((_Key("row_var", fits=_matrix), _Key("col_var", fits=_matrix), _Key("variance", fits=_vector))),
    "SparseAdam": _Spec(_MOMENTS.keys, int_step=True),
    "RMSprop": _Spec(
        (_Key("square_avg"), _Key("momentum_buffer", used=_nonzero("momentum")), _Key("grad_avg", used=_flag("centered")))
    ),
}


def _spec(name: str) -> _Spec:
    jax_optimizer_factory(name)  # ValueError (not torch) / NotImplementedError (not in jax_impl)
    if name not in _SPECS:
        raise NotImplementedError(f"optimizer state conversion for torch.optim.{name} is not implemented")
    return _SPECS[name]


# ---------------------------------------------------------------------------
# Parameters: names and torch order


def _leaf_names(params: Any) -> tuple[list[str], list[np.ndarray]]:
    """Dotted key paths (``parity._tree.flatten``'s spelling) and leaves, in JAX flattening order."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    names = [".".join(jax_key_name(entry) for entry in path) for path, _ in flat]
    return names, [leaf for _, leaf in flat]


def _torch_order(names: list[str], param_names: Sequence[str] | None) -> list[int]:
    """``order[i]`` = the JAX leaf index of torch's parameter ``i``."""
    if param_names is None:
        return list(range(len(names)))
    param_names = list(param_names)
    if len(param_names) != len(names):
        raise ValueError(f"param_names lists {len(param_names)} names, params has {len(names)} leaves")
    index = {name: i for i, name in enumerate(names)}
    seen: set[str] = set()
    for i, name in enumerate(param_names):
        if name not in index:
            raise KeyError(f"param {i} ({name!r}) in param_names is not a leaf of params (leaves: {names})")
        if name in seen:
            raise ValueError(f"param {i} ({name!r}) appears twice in param_names")
        seen.add(name)
    return [index[name] for name in param_names]


# ---------------------------------------------------------------------------
# Hyperparameters


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):  # torch accepts a tensor lr
        return value.item()
    if isinstance(value, list):  # YAML lists, torch's own tuples
        return tuple(_plain(v) for v in value)
    return value


def _group_kwargs(name: str, groups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``jax_impl.optim`` keyword arguments a torch param group describes.

    Keys the JAX function does not take are dropped when torch's constructor
    does not take them either (``params``, schedulers' ``initial_lr``, AdamW's
    fixed ``decoupled_weight_decay=True``).
    """
    jax_params = inspect.signature(jax_optimizer_factory(name)).parameters
    torch_params = inspect.signature(optimizer_class(name).__init__).parameters
    per_group = []
    for group in groups:
        kwargs = {}
        for key, value in group.items():
            if key in jax_params:
                kwargs[key] = _plain(value)
            elif key in torch_params and key != "params":
                raise NotImplementedError(f"torch.optim.{name} option {key!r} has no jax_impl.optim counterpart")
        per_group.append(kwargs)
    for i, kwargs in enumerate(per_group[1:], start=1):
        if kwargs != per_group[0]:
            diff = {k: (per_group[0].get(k), v) for k, v in kwargs.items() if per_group[0].get(k) != v}
            raise NotImplementedError(
                f"param group {i} has other hyperparameters than group 0 {diff}; jax_impl.optim runs one "
                "transformation per group: use grouped_optimizer_state_from_torch with jax_impl.optim.param_groups, "
                "or pass kwargs"
            )
    return per_group[0] if per_group else {}


def _resolved(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every keyword argument with its default (jax_impl's defaults are torch's)."""
    params = inspect.signature(jax_optimizer_factory(name)).parameters
    return {key: kwargs.get(key, p.default) for key, p in params.items()}


# ---------------------------------------------------------------------------
# torch -> JAX


def _where(index: int, name: str, key: str) -> str:
    return f"param {index} ({name!r}), state key {key!r}"


def _scalar_value(value: Any, where: str) -> np.float32:
    array = to_numpy(value) if isinstance(value, torch.Tensor) else np.asarray(value)
    if array.shape != ():
        raise ValueError(f"{where}: expected a scalar, got shape {array.shape}")
    if isinstance(value, torch.Tensor) and value.dtype != torch.float32:
        raise ValueError(f"{where}: dtype {value.dtype} does not match torch.float32 (jax_impl keeps a float32 scalar)")
    return np.float32(array)


def _step_value(value: Any, where: str) -> int:
    array = to_numpy(value) if isinstance(value, torch.Tensor) else np.asarray(value)
    if array.shape != () or not np.isfinite(array) or float(array) != int(array) or array < 0:
        raise ValueError(f"{where}: expected a non-negative whole step count, got {value!r}")
    return int(array)


def _same(values: list[tuple[int, Any]], names: list[str], key: str) -> Any:
    """jax_impl keeps one value where torch keeps one per parameter: they must agree."""
    first_index, first = values[0]
    for index, value in values[1:]:
        if value != first:
            raise ValueError(
                f"{_where(index, names[index], key)}: {value} differs from {first} at param {first_index} "
                f"({names[first_index]!r}); jax_impl.optim keeps one {key} for all parameters"
            )
    return first


def optimizer_state_from_torch(
    torch_state_dict: Mapping[str, Any],
    params: Any,
    *,
    name: str,
    param_names: Sequence[str] | None = None,
    **kwargs: Any,
) -> Any:
    """Loads ``torch.optim.<name>.state_dict()`` into the matching ``jax_impl.optim`` state.

    Continuing with ``jax_impl.optim.<name.lower()>(**kwargs).step`` from the
    result reproduces torch continuing after the same state dict.

    Args:
      torch_state_dict: ``optimizer.state_dict()``: ``"state"`` maps torch's
        parameter index to its state, ``"param_groups"`` lists the groups.
      params: the JAX parameter pytree (shapes and dtypes the state must match).
      name: the torch class name (``"Adam"``, ``"SGD"``, ...).
      param_names: dotted key paths of the JAX leaves in torch's parameter
        order; default: ``params``' flattening order, spelt as
        ``parity._tree.flatten`` spells it (``"layer.0.weight"``).
      **kwargs: ``jax_impl.optim`` keyword arguments fixing the state's layout
        (e.g. ``amsgrad=True``); default: the hyperparameters of torch's param
        groups, which must then all agree.

    Returns:
      The ``jax_impl.optim`` state NamedTuple (``count`` = torch's step; SGD,
      which counts no steps, gets 1 once it has momentum buffers, else 0).

    Raises:
      KeyError: a missing or unexpected state key or parameter index.
      ValueError: shape, dtype or parameter-count mismatches, or per-parameter
        step counts (or NAdam/ASGD scalars) that differ between parameters.
      NotImplementedError: an optimizer or option ``jax_impl.optim`` lacks.
    """
    if name == "LBFGS":  # one flat state for all parameters, not a per-parameter table
        return lbfgs_state_from_torch(torch_state_dict, params)
    spec = _spec(name)
    groups = list(torch_state_dict.get("param_groups", []))
    torch_state = dict(torch_state_dict.get("state", {}))
    build_kwargs = dict(kwargs) if kwargs else _group_kwargs(name, groups)
    hyper = _resolved(name, build_kwargs)
    initial = jax_optimizer_factory(name)(**build_kwargs).init(params)

    names, leaves = _leaf_names(params)
    order = _torch_order(names, param_names)
    torch_names = [names[j] for j in order]
    n_torch = sum(len(group["params"]) for group in groups)
    if groups and n_torch != len(names):
        raise ValueError(f"param count mismatch: torch's param_groups hold {n_torch} params, the JAX params {len(names)} leaves")
    for index in torch_state:
        if not isinstance(index, int) or not 0 <= index < len(names):
            raise KeyError(f"unexpected state for param index {index!r}: there are {len(names)} params")

    # Drop None entries (an old SGD's momentum_buffer=None): torch treats them as absent.
    per_param = {i: {k: v for k, v in s.items() if v is not None} for i, s in torch_state.items()}
    if not any(per_param.values()):
        return initial  # before the first step: torch has created no state yet

    used = [key for key in spec.keys if key.used(hyper)]
    treedef = jax.tree.structure(params)
    fields = {key.torch: treedef.flatten_up_to(getattr(initial, key.torch)) for key in used if not key.scalar}
    scalars: dict[str, list[tuple[int, Any]]] = {key.torch: [] for key in used if key.scalar}
    steps: list[tuple[int, Any]] = []
    for i in range(len(names)):
        state = per_param.get(i, {})
        here = [key for key in used if key.fits(np.ndim(leaves[order[i]]))]
        expected = (["step"] if spec.step else []) + [key.torch for key in here]
        for key in expected:
            if key not in state:
                raise KeyError(
                    f"{_where(i, torch_names[i], key)} is missing from torch's state"
                    + ("" if state else " (the param has no state: it had no grad? jax_impl keeps one step count for all)")
                )
        for key in state:
            if key not in expected:
                raise KeyError(f"{_where(i, torch_names[i], key)} is unexpected for torch.optim.{name} with {build_kwargs or 'defaults'}")
        if spec.step:
            steps.append((i, _step_value(state["step"], _where(i, torch_names[i], "step"))))
        for key in here:
            where = _where(i, torch_names[i], key.torch)
            if key.scalar:
                scalars[key.torch].append((i, _scalar_value(state[key.torch], where)))
                continue
            value = state[key.torch]
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"{where}: expected a tensor, got {type(value).__name__}")
            array, leaf = to_numpy(value), leaves[order[i]]
            want = tuple(fields[key.torch][order[i]].shape)  # the param's, or Adafactor's row/column shape
            if array.shape != want:
                of = "" if want == tuple(leaf.shape) else f"{want}, for "
                raise ValueError(f"{where}: shape {tuple(array.shape)} does not match {of}the JAX param's {tuple(leaf.shape)}")
            if array.dtype != leaf.dtype:
                raise ValueError(f"{where}: dtype {array.dtype} does not match the JAX param's {leaf.dtype}")
            fields[key.torch][order[i]] = jnp.asarray(array)

    count = _same(steps, torch_names, "step") if spec.step else 1
    values = {field: treedef.unflatten(flat) for field, flat in fields.items()}
    values.update({field: jnp.asarray(_same(v, torch_names, field), jnp.float32) for field, v in scalars.items()})
    return initial._replace(count=jnp.asarray(count, initial.count.dtype), **values)


# ---------------------------------------------------------------------------
# JAX -> torch


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    if dtype.name == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, dtype)).dtype


def _torch_tensor(array: np.ndarray) -> torch.Tensor:
    if array.dtype.name == "bfloat16":  # NumPy has no bfloat16: go through the bits
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(array, copy=True))


def _torch_scalar_dtype() -> torch.dtype:
    # torch.optim.optimizer._get_scalar_dtype: float64 only under a float64 default dtype.
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def optimizer_state_to_torch(
    jax_state: Any,
    params: Any,
    *,
    name: str,
    param_names: Sequence[str] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Writes a ``jax_impl.optim`` state as a ``torch.optim.<name>`` ``state_dict``.

    ``torch.optim.<name>(torch_params, **hyperparameters).load_state_dict(result)``
    accepts it, and torch then continues exactly as ``jax_impl`` would.

    Args:
      jax_state: the ``jax_impl.optim`` state NamedTuple.
      params: the JAX parameter pytree the state belongs to.
      name: the torch class name.
      param_names: dotted key paths of the JAX leaves in torch's parameter
        order (see :func:`optimizer_state_from_torch`).
      hyperparameters: torch keyword arguments the JAX optimizer was built with
        (plain values: a schedule's current value); default: torch's defaults.
        They fill ``param_groups`` and decide which buffers torch keeps.

    Returns:
      ``{"state": {i: {...}}, "param_groups": [group]}`` with torch's full group
      keys (read from the real torch optimizer built on ``meta`` tensors) and
      tensors as torch keeps them (``step`` a float32 scalar tensor, buffers in
      the parameter's dtype). Empty ``state`` before the first step, except for
      Adagrad, which torch fills at construction.

    Raises:
      ValueError: the state does not fit ``params`` (type, shapes, dtypes) or the
        hyperparameters (e.g. momentum buffers with ``momentum=0``).
      NotImplementedError: an optimizer or option ``jax_impl.optim`` lacks.
    """
    if name == "LBFGS":
        return lbfgs_state_to_torch(jax_state, params, hyperparameters=hyperparameters)
    spec = _spec(name)
    hyper = {key: _plain(value) for key, value in (hyperparameters or {}).items()}
    for key, value in hyper.items():
        if callable(value):
            raise ValueError(f"hyperparameter {key!r} is a schedule; torch's param_groups hold its current value")
    names, leaves = _leaf_names(params)
    order = _torch_order(names, param_names)
    arrays = [np.asarray(leaf) for leaf in leaves]

    # The real torch optimizer on shape-only tensors gives every group key with torch's defaults.
    dummies = [torch.empty(arrays[j].shape, dtype=_torch_dtype(arrays[j].dtype), device="meta") for j in order]
    group = optimizer_class(name)(dummies, **hyper).state_dict()["param_groups"][0]
    group["params"] = list(range(len(order)))

    expected = jax_optimizer_factory(name)(**_group_kwargs(name, [group])).init(params)
    if type(jax_state) is not type(expected):
        raise ValueError(f"expected a {type(expected).__name__} for torch.optim.{name}, got {type(jax_state).__name__}")
    treedef = jax.tree.structure(params)
    flat: dict[str, list[np.ndarray]] = {}
    for key in spec.keys:
        if key.scalar:
            continue
        if not key.used(group):
            # None at every leaf (older states: (0,)-shaped placeholders); real buffers contradict the hyperparameters.
            if any(np.size(leaf) for leaf in jax.tree.leaves(getattr(jax_state, key.torch))):
                raise ValueError(f"state key {key.torch!r} holds buffers, but torch.optim.{name} with "
                                 f"{hyper or 'defaults'} keeps none")
            continue
        try:
            flat[key.torch] = [None if v is None else np.asarray(v)
                               for v in treedef.flatten_up_to(getattr(jax_state, key.torch))]
        except (ValueError, TypeError) as error:
            field_has, params_has = holds_variables(getattr(jax_state, key.torch)), holds_variables(params)
            if field_has != params_has:
                forms = ("an nnx.State", "a pure dict") if field_has else ("a pure dict", "an nnx.State")
                raise ValueError(f"state field {key.torch!r} is {forms[0]} and params {forms[1]}: pass params in "
                                 "the form the optimizer state was built on (nnx.to_pure_dict(params) for a "
                                 "pure dict)") from None
            raise ValueError(f"state field {key.torch!r} does not have the structure of params: {error}") from None
        wanted = treedef.flatten_up_to(getattr(expected, key.torch))
        for i, j in enumerate(order):  # torch's order, so the first error is torch's first param
            value, want, where = flat[key.torch][j], wanted[j], _where(i, names[j], key.torch)
            if not key.fits(arrays[j].ndim):
                continue
            if value is None:
                raise ValueError(f"{where}: no buffer, but torch.optim.{name} keeps one for a {arrays[j].ndim}-d param")
            if value.shape != want.shape:
                raise ValueError(
                    f"{where}: shape {value.shape} does not match {want.shape} for torch.optim.{name} with {hyper or 'defaults'}"
                )
            if value.dtype != want.dtype:
                raise ValueError(f"{where}: dtype {value.dtype} does not match the param's {want.dtype}")

    count = int(jax_state.count)
    state: dict[int, dict[str, Any]] = {}
    if count > 0 or spec.eager:
        for i, j in enumerate(order):
            entry: dict[str, Any] = {}
            if spec.step:
                entry["step"] = count if spec.int_step else torch.tensor(float(count), dtype=_torch_scalar_dtype())
            for key in spec.keys:
                if not key.used(group) or not key.fits(arrays[j].ndim):
                    continue
                if key.scalar:
                    entry[key.torch] = torch.tensor(float(np.float32(getattr(jax_state, key.torch))), dtype=_torch_scalar_dtype())
                else:
                    entry[key.torch] = _torch_tensor(flat[key.torch][j])
            state[i] = entry
    return {"state": state, "param_groups": [group]}


# ---------------------------------------------------------------------------
# Param groups


def _group_leaves(params: Any, groups: Sequence[Sequence[str]]) -> list[tuple[list[Any], list[str]]]:
    """Per group: its leaves in JAX flattening order (``jax_impl.optim.param_groups``' lists)
    and the ``param_names`` (torch's order, as indices into that list)."""
    names, leaves = _leaf_names(params)
    owner: dict[str, int] = {}
    for g, members in enumerate(groups):
        for member in members:
            if member not in names:
                raise KeyError(f"param group {g}: {member!r} is not a leaf of params (leaves: {names})")
            if member in owner:
                raise ValueError(f"some parameters appear in more than one parameter group: {member!r}")
            owner[member] = g
    out = []
    for g, members in enumerate(groups):
        in_order = [n for n in names if owner.get(n) == g]
        position = {n: str(i) for i, n in enumerate(in_order)}
        out.append(([leaves[names.index(n)] for n in in_order], [position[m] for m in members]))
    return out


def grouped_optimizer_state_from_torch(
    torch_state_dict: Mapping[str, Any],
    params: Any,
    *,
    name: str,
    groups: Sequence[Sequence[str]],
) -> Any:
    """:func:`optimizer_state_from_torch` for ``jax_impl.optim.param_groups``.

    Args:
      torch_state_dict: ``optimizer.state_dict()`` of a torch optimizer built
        with one param group per entry of ``groups``, in that order.
      params: the JAX parameter pytree.
      name: the torch class name.
      groups: per torch param group, the dotted key paths (``parity._tree``
        spelling) of its JAX leaves, in the group's ``params`` order.

    Returns:
      ``ParamGroupsState`` with one inner state per group, each built from that
      group's hyperparameters in torch's ``param_groups``.
    """
    from jax_impl.optim import ParamGroupsState

    torch_groups = list(torch_state_dict.get("param_groups", []))
    if len(torch_groups) != len(groups):
        raise ValueError(f"torch's state_dict has {len(torch_groups)} param groups, groups lists {len(groups)}")
    state = dict(torch_state_dict.get("state", {}))
    inner = []
    for g, ((leaves, names), group) in enumerate(zip(_group_leaves(params, groups), torch_groups, strict=True)):
        if len(group["params"]) != len(leaves):
            raise ValueError(f"param group {g}: torch's group holds {len(group['params'])} params, groups lists {len(leaves)}")
        indices = list(group["params"])
        sub = {"state": {i: state[index] for i, index in enumerate(indices) if index in state},
               "param_groups": [{**group, "params": list(range(len(indices)))}]}
        inner.append(optimizer_state_from_torch(sub, leaves, name=name, param_names=names))
    extra = set(state) - {i for group in torch_groups for i in group["params"]}
    if extra:
        raise KeyError(f"unexpected state for param indices {sorted(extra)}: not in any param group")
    return ParamGroupsState(tuple(inner))


def grouped_optimizer_state_to_torch(
    jax_state: Any,
    params: Any,
    *,
    name: str,
    groups: Sequence[Sequence[str]],
    hyperparameters: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """:func:`optimizer_state_to_torch` for ``jax_impl.optim.param_groups``.

    Args:
      jax_state: the ``ParamGroupsState``.
      params: the JAX parameter pytree.
      name: the torch class name.
      groups: per group, its leaves' dotted key paths in torch's order (the
        torch optimizer's ``param_groups[g]["params"]`` order).
      hyperparameters: per group, the torch keyword arguments it was built with.

    Returns:
      A state dict with one torch param group per group, parameters numbered
      across the groups as torch numbers them.
    """
    from jax_impl.optim import ParamGroupsState

    if not isinstance(jax_state, ParamGroupsState):
        raise ValueError(f"expected a ParamGroupsState for {len(groups)} param groups, got {type(jax_state).__name__}")
    if not len(jax_state.groups) == len(groups) == len(hyperparameters):
        raise ValueError(f"{len(jax_state.groups)} group states, {len(groups)} groups, "
                         f"{len(hyperparameters)} hyperparameter sets: they must agree")
    state: dict[int, dict[str, Any]] = {}
    param_groups, offset = [], 0
    for g, (leaves, names) in enumerate(_group_leaves(params, groups)):
        sub = optimizer_state_to_torch(jax_state.groups[g], leaves, name=name, param_names=names,
                                       hyperparameters=hyperparameters[g])
        state.update({offset + i: entry for i, entry in sub["state"].items()})
        group = sub["param_groups"][0]
        group["params"] = [offset + i for i in group["params"]]
        param_groups.append(group)
        offset += len(leaves)
    return {"state": state, "param_groups": param_groups}
