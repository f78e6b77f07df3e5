"""Flatten torch objects and JAX pytrees into ``{"dotted.key": np.ndarray}``.

Both sides of a comparison are reduced to the same shape of data: a flat
mapping from a dotted key path (torch's ``state_dict`` spelling, e.g.
``layer1.0.conv1.weight`` or ``state.0.exp_avg``) to a NumPy array. torch is
never imported here; torch objects are recognised by duck typing, so this
module also serves NumPy-only and JAX-only users.
"""

from __future__ import annotations

import dataclasses
import numbers
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["flatten", "jax_key_name", "to_numpy"]


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "dtype")


def _is_torch_module(obj: Any) -> bool:
    return hasattr(obj, "state_dict") and hasattr(obj, "named_parameters") and callable(obj.state_dict)


def _torch_to_numpy(tensor: Any) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        # NumPy has no bfloat16; reinterpret the bits as ml_dtypes' bfloat16.
        import ml_dtypes
        import torch

        return tensor.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.resolve_conj().resolve_neg().numpy()


def to_numpy(leaf: Any) -> np.ndarray:
    """Converts one leaf (torch tensor, JAX array, NumPy array, scalar) to NumPy."""
    if _is_torch_tensor(leaf):
        return _torch_to_numpy(leaf)
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(leaf, nnx.Variable):
        leaf = leaf.value  # an nnx.Param, nnx.BatchStat, ...
    return np.asarray(leaf)


def jax_key_name(entry: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def holds_variables(tree: Any) -> bool:
    """Whether ``tree`` has ``flax.nnx.Variable`` nodes: an ``nnx.State``'s form, not a pure dict's."""
    nnx = sys.modules.get("flax.nnx")  # only present if the caller uses flax
    if nnx is None:
        return False
    import jax

    return any(isinstance(leaf, nnx.Variable)
               for leaf in jax.tree.leaves(tree, is_leaf=lambda v: isinstance(v, nnx.Variable)))


def flatten(obj: Any) -> dict[str, np.ndarray]:
    """Flattens ``obj`` into ``{dotted_key: array}``.

    Understands torch tensors and ``nn.Module`` s (through ``state_dict()``),
    mappings (``state_dict`` s, ``nnx.State`` pure dicts), NamedTuples (by field
    name), lists and tuples (by index), dataclasses, scalars, NumPy/JAX arrays,
    ``flax.nnx`` modules (through ``nnx.state``) and, as a fallback, any
    registered JAX pytree. ``None`` leaves are dropped (optax uses them for
    empty states). A top-level array flattens to the key ``""``.
    """
    out: dict[str, np.ndarray] = {}
    _flatten_into(obj, "", out)
    return out


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _flatten_into(obj: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    if obj is None:
        return
    if _is_torch_tensor(obj) or isinstance(obj, (np.ndarray, np.generic, numbers.Number)):
        out[prefix] = to_numpy(obj)
        return
    if _is_torch_module(obj):
        _flatten_into(obj.state_dict(), prefix, out)
        return
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            _flatten_into(value, _join(prefix, str(key)), out)
        return
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name in obj._fields:
            _flatten_into(getattr(obj, name), _join(prefix, name), out)
        return
    if isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            _flatten_into(value, _join(prefix, str(index)), out)
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            _flatten_into(getattr(obj, field.name), _join(prefix, field.name), out)
        return
    _flatten_jax(obj, prefix, out)


def _flatten_jax(obj: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    import jax

    nnx = sys.modules.get("flax.nnx")  # only present if the caller uses flax
    if nnx is not None:
        if isinstance(obj, nnx.Module):
            obj = nnx.state(obj)
        if isinstance(obj, nnx.State):
            _flatten_into(nnx.to_pure_dict(obj), prefix, out)
            return
        if isinstance(obj, nnx.Variable):
            _flatten_into(obj.value, prefix, out)
            return
    if isinstance(obj, jax.Array) or hasattr(obj, "__array__"):
        out[prefix] = np.asarray(obj)
        return
    leaves = jax.tree_util.tree_flatten_with_path(obj)[0]
    if len(leaves) == 1 and leaves[0][1] is obj:
        raise TypeError(f"cannot compare an object of type {type(obj).__name__} at {prefix or '<root>'!r}")
    for path, leaf in leaves:
        name = ".".join(jax_key_name(entry) for entry in path)
        _flatten_into(leaf, _join(prefix, name), out)
