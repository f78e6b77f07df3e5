"""``torch.utils.data.default_collate`` / ``default_convert`` producing numpy arrays.

Follows ``torch/utils/data/_utils/collate.py``: dispatch on the first
element's exact type in :data:`default_collate_fn_map`, then on ``isinstance``
in the map's insertion order, then on container kind. Leaves become numpy
arrays where torch makes tensors:

* ``np.ndarray`` -> ``np.stack`` (string/object dtypes raise ``TypeError``);
* numpy scalars (``np.bool_``, ``np.number``, ``np.object_``) ->
  ``np.asarray(batch)`` (torch: ``as_tensor(batch)``);
* ``float`` -> float64; ``int`` -> int64 (``bool`` batches stay bool, and a
  float among ints gives float32, torch's default dtype, as ``torch.tensor``);
* ``str``/``bytes`` -> the list unchanged;
* mappings -> same mapping type per key; namedtuples -> same type; other
  tuples -> ``list``; other sequences -> same type after an equal-length check.
"""

from __future__ import annotations

import collections.abc
import copy
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from jax_impl.data.dataset import GatheredBatch

np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, "
    "dicts or lists; found {}"
)

CollateFnMap = dict[type | tuple[type, ...], Callable[..., Any]]


def default_convert(data: Any) -> Any:
    """torch's ``default_convert``: numpy leaves become arrays, containers recurse.

    numpy scalars become 0-d arrays (torch: ``as_tensor``); string/object
    arrays and non-numpy leaves are returned unchanged; tuples become lists.
    """
    elem_type = type(data)
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in (
        "str_",
        "string_",
    ):
        if (
            elem_type.__name__ == "ndarray"
            and np_str_obj_array_pattern.search(data.dtype.str) is not None
        ):
            return data
        return np.asarray(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(
        data, (str, bytes)
    ):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch: Any, *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """torch's generic ``collate``: leaf functions from ``collate_fn_map``, containers here."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](
                    batch, collate_fn_map=collate_fn_map
                )
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(
                    {
                        key: collate(
                            [d[key] for d in batch], collate_fn_map=collate_fn_map
                        )
                        for key in elem
                    }
                )
                return clone
            return elem_type(
                {
                    key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                    for key in elem
                }
            )
        except TypeError:
            return {
                key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                for key in elem
            }
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(
            *(
                collate(samples, collate_fn_map=collate_fn_map)
                for samples in zip(*batch)
            )
        )
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [
                collate(samples, collate_fn_map=collate_fn_map)
                for samples in transposed
            ]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type(
                [
                    collate(samples, collate_fn_map=collate_fn_map)
                    for samples in transposed
                ]
            )
        except TypeError:
            return [
                collate(samples, collate_fn_map=collate_fn_map)
                for samples in transposed
            ]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_numpy_array_fn(
    batch: Any, *, collate_fn_map: CollateFnMap | None = None
) -> np.ndarray:
    """Stack arrays along a new axis 0 (torch: ``as_tensor`` each, then ``stack``)."""
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return np.stack([np.asarray(b) for b in batch], 0)


def collate_numpy_scalar_fn(
    batch: Any, *, collate_fn_map: CollateFnMap | None = None
) -> np.ndarray:
    """``as_tensor(batch)`` on numpy scalars: a 1-D array of their dtype."""
    return np.asarray(batch)


def collate_float_fn(
    batch: Any, *, collate_fn_map: CollateFnMap | None = None
) -> np.ndarray:
    """``torch.tensor(batch, dtype=torch.float64)``."""
    return np.asarray(batch, dtype=np.float64)


def collate_int_fn(
    batch: Any, *, collate_fn_map: CollateFnMap | None = None
) -> np.ndarray:
    """``torch.tensor(batch)`` on ints: int64, bool for bools, float32 if a float is mixed in."""
    arr = np.asarray(batch)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    return arr.astype(np.int64)


def collate_str_fn(batch: Any, *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Strings and bytes are returned as the list itself."""
    return batch


default_collate_fn_map: CollateFnMap = {
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch: Any) -> Any:
    """torch's ``default_collate`` with numpy leaves (see the module docstring).

    A :class:`~jax_impl.data.dataset.GatheredBatch` (from
    ``TensorDataset.__getitems__``) is collated without a per-sample loop:
    ``[a[indices], b[indices], ...]``, equal to collating its sample tuples.
    """
    if isinstance(batch, GatheredBatch) and not any(
        np_str_obj_array_pattern.search(a.dtype.str) for a in batch.arrays
    ):
        return list(batch.arrays)
    return collate(batch, collate_fn_map=default_collate_fn_map)
