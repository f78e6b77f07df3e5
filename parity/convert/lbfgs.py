"""``torch.optim.LBFGS.state_dict()`` <-> ``jax_impl.optim.LBFGSState``.

torch keeps LBFGS's whole state under its first parameter
(``state_dict()["state"][0]``), over the parameters flattened into one vector
(``_gather_flat_grad``: each parameter raveled, in ``param_groups[0]["params"]``
order)::

    func_evals, n_iter     Python ints (every closure call; every iteration)
    d, prev_flat_grad      flat tensors in the parameters' dtype
    t                      a Python float, or a 0-d tensor (the first step's min(1, 1/sum|g|) lr)
    old_dirs, old_stps     lists of flat tensors (y and s of the kept curvature pairs)
    ro                     a list of 0-d tensors (1 / y.s)
    H_diag                 the int 1, or a 0-d tensor (y.s / y.y)
    prev_loss              a Python float
    al                     [None] * history_size, filled with 0-d tensors; absent before the second iteration

``jax_impl.optim.LBFGSState`` has the same fields with NumPy in place of
tensors (0-d tensors become NumPy scalars of their dtype, Python numbers stay
Python numbers), so both sides continue with the same values and the same
float/tensor arithmetic. The flat vectors follow the order in which the JAX
step was given the parameters: give ``jax_impl.optim.lbfgs``'s ``step`` the
leaves in torch's ``parameters()`` order (``parity run`` does) for the
vectors to line up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import torch

from jax_impl.optim import LBFGSState

__all__ = ["lbfgs_state_from_torch", "lbfgs_state_to_torch"]

_VECTORS = ("d", "prev_flat_grad")
_LISTS = ("old_dirs", "old_stps")
_SCALAR_LISTS = ("ro",)
_SCALARS = ("t", "H_diag", "prev_loss")
_COUNTS = ("func_evals", "n_iter")
_KEYS = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss",
         "al")


def _layout(params: Any) -> tuple[int, np.dtype]:
    """``(numel, dtype)`` of the flat parameter vector."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise ValueError("params has no leaves")
    dtype = np.result_type(*[np.asarray(leaf).dtype for leaf in leaves])
    return sum(math.prod(np.shape(leaf)) for leaf in leaves), dtype


def _from_value(value: Any, key: str, numel: int, dtype: np.dtype, vector: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        if vector:
            raise ValueError(f"state key {key!r}: expected a tensor, got {type(value).__name__}")
        return value  # Python numbers stay numbers, as torch keeps them
    array = value.detach().cpu().numpy()
    if array.dtype != dtype:
        raise ValueError(f"state key {key!r}: dtype {array.dtype} does not match the params' {dtype}")
    if vector:
        if array.shape != (numel,):
            raise ValueError(f"state key {key!r}: shape {array.shape} does not match the {numel} flat params")
        return array.copy()
    if array.shape != ():
        raise ValueError(f"state key {key!r}: expected a scalar, got shape {array.shape}")
    return array[()]


def lbfgs_state_from_torch(torch_state_dict: Mapping[str, Any], params: Any) -> LBFGSState:
    """Loads ``torch.optim.LBFGS.state_dict()`` into a ``jax_impl.optim.LBFGSState``.

    Args:
      torch_state_dict: the optimizer's ``state_dict()``: one param group, the
        state (when torch has stepped) under index 0.
      params: the JAX parameter pytree, for the flat size and dtype.

    Raises:
      KeyError: state under another index, or an unknown key.
      ValueError: more than one param group, vectors of the wrong size or dtype.
    """
    numel, dtype = _layout(params)
    groups = list(torch_state_dict.get("param_groups", []))
    if len(groups) > 1:
        raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
    state = dict(torch_state_dict.get("state", {}))
    if set(state) - {0}:
        raise KeyError(f"LBFGS keeps its state under param index 0, got indices {sorted(state)}")
    entry = dict(state.get(0, {}))
    unknown = set(entry) - set(_KEYS)
    if unknown:
        raise KeyError(f"unexpected LBFGS state keys {sorted(unknown)}")
    values: dict[str, Any] = {}
    for key in _COUNTS:
        values[key] = int(entry.get(key, 0))
    for key in _VECTORS:
        if entry.get(key) is not None:
            values[key] = _from_value(entry[key], key, numel, dtype, vector=True)
    for key in _SCALARS:
        if key in entry:
            values[key] = _from_value(entry[key], key, numel, dtype, vector=False)
    for key in _LISTS:
        values[key] = tuple(_from_value(v, key, numel, dtype, vector=True) for v in entry.get(key) or ())
    for key in _SCALAR_LISTS:
        values[key] = tuple(_from_value(v, key, numel, dtype, vector=False) for v in entry.get(key) or ())
    if entry.get("al") is not None:
        values["al"] = tuple(None if v is None else _from_value(v, "al", numel, dtype, vector=False)
                             for v in entry["al"])
    return LBFGSState(**values)


def _to_value(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return torch.from_numpy(np.array(value, copy=True))
    if isinstance(value, (np.ndarray, np.generic)):  # a NumPy scalar: torch's 0-d tensor
        return torch.from_numpy(np.array(value, copy=True))
    return value


def lbfgs_state_to_torch(state: LBFGSState, params: Any, *, hyperparameters: Mapping[str, Any] | None = None
                         ) -> dict[str, Any]:
    """Writes a ``jax_impl.optim.LBFGSState`` as ``torch.optim.LBFGS``'s ``state_dict``.

    Args:
      state: the JAX optimizer's state.
      params: the JAX parameter pytree (its leaf count numbers torch's params).
      hyperparameters: ``torch.optim.LBFGS`` keyword arguments, filling the param group
        (default: torch's defaults).

    Returns:
      ``{"state": {0: {...}} or {}, "param_groups": [group]}``, the group with
      every key torch keeps (read from the real optimizer on ``meta`` tensors).

    Raises:
      ValueError: ``state`` is not an ``LBFGSState``, or its vectors do not fit ``params``.
    """
    if not isinstance(state, LBFGSState):
        raise ValueError(f"expected an LBFGSState for torch.optim.LBFGS, got {type(state).__name__}")
    numel, dtype = _layout(params)
    n_params = len(jax.tree.leaves(params))
    dummies = [torch.empty(0, device="meta") for _ in range(n_params)]
    group = torch.optim.LBFGS(dummies, **dict(hyperparameters or {})).state_dict()["param_groups"][0]
    for key in (*_VECTORS, *_LISTS):
        for value in (getattr(state, key),) if key in _VECTORS else getattr(state, key):
            if value is not None and (np.shape(value) != (numel,) or np.asarray(value).dtype != dtype):
                raise ValueError(f"state field {key!r}: shape {np.shape(value)} / dtype {np.asarray(value).dtype} "
                                 f"does not fit the {numel} flat params of dtype {dtype}")
    if state.func_evals == 0 and state.n_iter == 0 and state.d is None:
        return {"state": {}, "param_groups": [group]}  # torch has not stepped
    entry: dict[str, Any] = {"func_evals": int(state.func_evals), "n_iter": int(state.n_iter)}
    if state.al is not None:  # set inside the loop (from the second iteration on), "d" after it
        entry["al"] = [None if v is None else _to_value(v) for v in state.al]
    if state.d is not None:  # torch sets the rest after the first iteration
        entry.update({
            "d": _to_value(state.d), "t": _to_value(state.t),
            "old_dirs": [_to_value(v) for v in state.old_dirs], "old_stps": [_to_value(v) for v in state.old_stps],
            "ro": [_to_value(v) for v in state.ro], "H_diag": _to_value(state.H_diag),
            "prev_flat_grad": _to_value(state.prev_flat_grad), "prev_loss": state.prev_loss,
        })
    return {"state": {0: entry}, "param_groups": [group]}
