"""default_collate / default_convert against torch's, converted to numpy."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_impl.data.collate import default_collate, default_convert


class Point(NamedTuple):
    x: Any
    y: Any


def to_numpy(x: Any) -> Any:
    """torch's collate output with tensors replaced by numpy, containers kept."""
    if isinstance(x, torch.Tensor):
        return x.numpy()
    if isinstance(x, collections.abc.Mapping):
        return type(x)({k: to_numpy(v) for k, v in x.items()})
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(to_numpy(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(to_numpy(v) for v in x)
    return x


def assert_same(ours: Any, ref: Any) -> None:
    assert type(ours) is type(ref), (type(ours), type(ref))
    if isinstance(ref, np.ndarray):
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        np.testing.assert_array_equal(ours, ref)
    elif isinstance(ref, collections.abc.Mapping):
        assert list(ours) == list(ref)
        for k in ref:
            assert_same(ours[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref, strict=True):
            assert_same(a, b)
    else:
        assert ours == ref


def check(batch: list[Any]) -> None:
    assert_same(default_collate(batch), to_numpy(tud.default_collate(batch)))


def leaf(kind: str, i: int) -> Any:
    rng = np.random.default_rng(i)
    return {
        "float": float(rng.normal()),
        "int": int(rng.integers(-100, 100)),
        "bool": bool(rng.integers(0, 2)),
        "np_f32": np.float32(rng.normal()),
        "np_i32": np.int32(rng.integers(0, 9)),
        "np_bool": np.bool_(rng.integers(0, 2)),
        "arr_f32": rng.normal(size=(2, 3)).astype(np.float32),
        "arr_i64": rng.integers(0, 9, size=(4,)),
        "arr0d": np.array(rng.normal()),
        "str": f"s{i}",
        "bytes": b"b%d" % i,
    }[kind]


kinds = st.sampled_from(
    [
        "float",
        "int",
        "bool",
        "np_f32",
        "np_i32",
        "np_bool",
        "arr_f32",
        "arr_i64",
        "arr0d",
        "str",
        "bytes",
    ]
)


@settings(max_examples=40, deadline=None)
@given(
    kind=kinds,
    size=st.integers(1, 5),
    container=st.sampled_from(["leaf", "tuple", "list", "dict", "point", "nested"]),
)
def test_collate_matches_torch(kind: str, size: int, container: str) -> None:
    def sample(i: int) -> Any:
        v = leaf(kind, i)
        return {
            "leaf": v,
            "tuple": (v, leaf("int", i + 1)),
            "list": [v, v],
            "dict": {"a": v, "b": leaf("float", i)},
            "point": Point(v, leaf("arr_f32", i)),
            "nested": {"p": Point((v, [v]), {"q": v}), "t": (v,)},
        }[container]

    check([sample(i) for i in range(size)])


def test_collate_ordered_dict_and_mixed_int_float() -> None:
    check([collections.OrderedDict(b=1, a=2.0), collections.OrderedDict(b=3, a=4.0)])
    check([1, 2.5, 3])  # int first: torch.tensor picks its default float32


def test_collate_errors_match_torch() -> None:
    with pytest.raises(
        RuntimeError, match="each element in list of batch should be of equal size"
    ):
        default_collate([[1, 2], [3]])
    with pytest.raises(
        RuntimeError, match="each element in list of batch should be of equal size"
    ):
        tud.default_collate([[1, 2], [3]])
    for bad in ([np.array(["a"]), np.array(["b"])], [object(), object()]):
        with pytest.raises(TypeError) as ours:
            default_collate(bad)
        with pytest.raises(TypeError) as ref:
            tud.default_collate(bad)
        assert str(ours.value) == str(ref.value).replace(
            "torch.Tensor", "numpy.ndarray"
        )


def test_default_convert_matches_torch() -> None:
    data = {
        "a": np.arange(3),
        "b": (np.float32(1.5), 2, "x"),
        "c": Point(np.ones(2), [np.int64(4)]),
        "s": np.array(["u"]),
    }
    ours, ref = default_convert(data), tud.default_convert(data)
    assert list(ours) == list(ref)
    np.testing.assert_array_equal(ours["a"], ref["a"].numpy())
    assert isinstance(ours["b"], list) and ours["b"][1:] == ref["b"][1:]
    assert ours["b"][0].dtype == ref["b"][0].numpy().dtype
    assert isinstance(ours["c"], Point)
    np.testing.assert_array_equal(ours["c"].y[0], ref["c"].y[0].numpy())
    assert ours["s"] is data["s"] and ref["s"] is data["s"]
