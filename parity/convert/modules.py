"""Module weights: torch ``state_dict`` <-> ``jax_impl.nn`` (``flax.nnx``) modules, key for key.

``jax_impl.nn`` layers name their variables as torch names its parameters and
buffers (``weight``, ``bias``, ``running_mean``, ``running_var``,
``num_batches_tracked``; children under their attribute names, ``"0"``,
``"1"``, ... in ``Sequential``), so a torch key ``layer1.0.bn1.running_mean``
is the nnx state path ``("layer1", "0", "bn1", "running_mean")``. Both
directions are strict, like ``torch.nn.Module.load_state_dict(strict=True)``:
missing and unexpected keys, and shape mismatches, raise an error naming them
all; nothing is loaded unless everything fits.

Dtypes follow the module (torch's ``copy_`` semantics): a float64 checkpoint
loaded into a float32 module is rounded, ``num_batches_tracked`` (int64 in
torch) is stored as the module's integer dtype (int32 unless jax x64 is on)
after a range check. Exporting gives torch's dtypes back (int64 counters).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx
from flax.nnx import graph

from jax_impl.nn.modules.module import Buffer

__all__ = ["load_torch_state_dict", "module_state", "tied_keys", "to_torch_state_dict"]

# Variable types that make up a torch state_dict: parameters, running stats, buffers.
_STATE_TYPES = (nnx.Param, nnx.BatchStat, Buffer)


# How flax's graph flattening wraps a node's data children (absent in older flax: the children themselves).
_DATA_ELEM = getattr(graph, "DataElem", None)


def module_state(module: nnx.Module) -> dict[str, nnx.Variable]:
    """The module's variables under torch's dotted ``state_dict`` keys (RNG state excluded).

    A variable held in several places (tied weights: ``self.decoder.weight = self.encoder.weight``) is listed
    under each of its keys, as torch's ``state_dict`` lists a shared parameter under each name
    (``nnx.state`` keeps one of them).
    """
    return {".".join(map(str, path)): var for path, var in _walk(module, (), set())
            if isinstance(var, _STATE_TYPES)}


def tied_keys(module: nnx.Module, torch_keys: Iterable[str]) -> dict[str, str]:
    """``{key: kept key}`` for each key of :func:`module_state` whose variable torch names by another key.

    ``torch_keys`` is the torch model's ``state_dict()`` keys, in its order. torch's ``named_parameters()``
    and ``parameters()`` keep a shared parameter under the first name it was registered by, the first of
    its keys in ``state_dict()``; ``nnx.state`` keeps one of its keys by its own order. So
    ``{tied_keys(m, keys).get(k, k)}`` names each leaf of ``nnx.state(m)`` as torch's ``named_parameters()``
    does. Empty for a model without shared variables.
    """
    rank = {key: i for i, key in enumerate(torch_keys)}
    groups: dict[int, list[str]] = {}
    for key, var in module_state(module).items():
        groups.setdefault(id(var), []).append(key)
    tied = {}
    for keys in groups.values():
        if len(keys) > 1:
            kept = min(keys, key=lambda k: rank.get(k, len(rank)))
            tied.update({key: kept for key in keys if key != kept})
    return tied


def _walk(node: Any, path: tuple, above: set[int]):
    """``(path, variable)`` for every variable reachable from ``node``, shared ones once per path.

    Children are visited in the order of their attributes (``vars``: the order they were set in, for a module
    built by its constructor), and a node is never entered again below itself (a reference back up the tree).
    """
    if isinstance(node, nnx.Variable):
        yield path, node
        return
    if not graph.is_node(node) or id(node) in above:
        return
    children, _ = graph.get_node_impl(node).flatten(node)
    if hasattr(node, "__dict__"):
        order = {name: i for i, name in enumerate(vars(node))}
        children = sorted(children, key=lambda item: order.get(item[0], len(order)))
    above = above | {id(node)}
    for key, child in children:
        if _DATA_ELEM is not None and isinstance(child, _DATA_ELEM):  # flax >= 0.11 wraps each child's value
            child = child.value
        yield from _walk(child, (*path, key), above)


def _read(source) -> Mapping[str, Any]:
    """A state dict from a mapping, a module or a file; a file that is not one raises ``ValueError`` naming it."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ValueError(f"state dict file not found: {path}")
        if path.endswith(".safetensors"):
            try:
                from safetensors.numpy import load_file
            except ImportError as err:  # pragma: no cover - depends on the environment
                raise ImportError("reading .safetensors needs the 'safetensors' package") from err
            loader = load_file
        else:
            loader = lambda p: torch.load(p, map_location="cpu", weights_only=True)  # noqa: E731
        try:
            loaded = loader(path)
        except Exception as error:  # noqa: BLE001 - any failure to parse a user's file is bad input
            text = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
            if "weights_only" in str(error):
                text = "it holds Python objects, not only tensors (loading it would run code)"
            raise ValueError(f"cannot read state dict {path}: {text}") from None
        if not isinstance(loaded, Mapping):
            raise ValueError(f"{path} holds a {type(loaded).__name__}, not a state dict (a mapping of names to tensors)")
        return loaded
    if isinstance(source, torch.nn.Module):
        return source.state_dict()
    if not isinstance(source, Mapping):
        raise ValueError(f"expected a state dict (a mapping of names to tensors), a file or a module, "
                         f"got {type(source).__name__}")
    return source


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def load_torch_state_dict(module: nnx.Module, state_dict, strict: bool = True) -> nnx.Module:
    """Copy a torch ``state_dict`` (mapping, ``.pt``/``.safetensors`` path, or a torch module) into ``module``.

    Args:
      module: a ``jax_impl.nn`` model (or any nnx module with torch's names).
      state_dict: ``{dotted key: tensor/array}``, a file path, or an ``nn.Module``.
      strict: like torch: every key must match both ways. With ``strict=False``
        missing and unexpected keys are skipped (shape mismatches still raise).

    Returns:
      ``module``, updated in place.

    Raises:
      RuntimeError: as torch's ``load_state_dict``: missing or unexpected keys
        (``strict=True``), shape mismatches, or a counter out of the module's
        integer range, all listed in one message.
    """
    source = {k: _to_numpy(v) for k, v in _read(state_dict).items()}
    target = module_state(module)
    missing = [k for k in target if k not in source]
    unexpected = [k for k in source if k not in target]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if unexpected:
            parts.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        raise RuntimeError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(parts))
    updates = {}
    errors = []
    for key, var in target.items():
        if key not in source:
            continue
        value, current = source[key], var[...]
        if value.shape != current.shape:
            errors.append(
                f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from checkpoint, "
                f"the shape in current model is {tuple(current.shape)}."
            )
            continue
        if jnp.issubdtype(current.dtype, jnp.integer):
            info = jnp.iinfo(current.dtype)
            if value.size and (value.min() < info.min or value.max() > info.max):
                errors.append(f"{key}: value {value} does not fit the module's {current.dtype} (enable jax x64)")
                continue
        updates[key] = jnp.asarray(value.astype(current.dtype))
    if errors:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    for key, value in updates.items():
        target[key][...] = value
    return module


def to_torch_state_dict(module: nnx.Module, path: str | os.PathLike | None = None) -> OrderedDict[str, torch.Tensor]:
    """The module's parameters and buffers as a torch ``state_dict`` (``load_state_dict`` accepts it).

    Integer counters are exported as int64, as torch stores ``num_batches_tracked``.
    With ``path``, the dict is also saved there (``torch.save``, or safetensors
    for a ``.safetensors`` path).
    """
    out: OrderedDict[str, torch.Tensor] = OrderedDict()
    for key, var in module_state(module).items():
        value = np.asarray(var[...])
        if np.issubdtype(value.dtype, np.integer):
            value = value.astype(np.int64)
        out[key] = torch.from_numpy(np.array(value))
    if path is not None:
        if os.fspath(path).endswith(".safetensors"):
            from safetensors.torch import save_file

            save_file(dict(out), os.fspath(path))
        else:
            torch.save(out, path)
    return out
