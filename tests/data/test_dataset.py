"""Datasets and random_split against torch.utils.data, run side by side."""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_impl.data import generator as G
from jax_impl.data.collate import default_collate
from jax_impl.data.dataset import (
    ConcatDataset,
    Dataset,
    GatheredBatch,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from jax_impl.data.generator import Generator


@contextlib.contextmanager
def global_rngs() -> Iterator[None]:
    """Restore torch's and our global generators after a test touches them."""
    torch_state = torch.get_rng_state()
    ours = G.default_generator.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        G.default_generator.set_state(ours)


def test_tensor_dataset_matches_torch() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=10)
    ours = TensorDataset(x, y)
    ref = tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    assert len(ours) == len(ref)
    for i in (0, 3, -1):
        for a, b in zip(ours[i], ref[i], strict=True):
            np.testing.assert_array_equal(a, b.numpy())
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        TensorDataset(x, y[:3])


@settings(max_examples=10, deadline=None)
@given(indices=st.lists(st.integers(0, 9), min_size=1, max_size=12))
def test_tensor_dataset_getitems_collates_like_samples(indices: list[int]) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 2, 3))
    y = rng.integers(0, 5, size=10)
    ds = TensorDataset(x, y)
    batch = ds.__getitems__(indices)
    assert isinstance(batch, GatheredBatch)
    assert len(batch) == len(indices)
    samples = [ds[i] for i in indices]
    for got, want in zip(batch, samples, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    fast = default_collate(batch)
    ref = tud.default_collate(
        [tuple(torch.from_numpy(np.asarray(v)) for v in s) for s in samples]
    )
    assert isinstance(fast, list)
    for a, b in zip(fast, ref, strict=True):
        assert a.dtype == b.numpy().dtype
        np.testing.assert_array_equal(a, b.numpy())
    # Subset forwards __getitems__ with remapped indices.
    sub = Subset(ds, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    got = default_collate(sub.__getitems__(indices))
    np.testing.assert_array_equal(got[1], y[[9 - i for i in indices]])


def test_concat_dataset_matches_torch() -> None:
    parts = [list(range(3)), list(range(10, 15)), [], list(range(20, 22))]
    ours, ref = ConcatDataset(parts), tud.ConcatDataset(parts)
    assert len(ours) == len(ref)
    assert ours.cumulative_sizes == ref.cumulative_sizes
    assert [ours[i] for i in range(-len(ours), len(ours))] == [
        ref[i] for i in range(-len(ref), len(ref))
    ]
    with pytest.raises(ValueError, match="absolute value of index"):
        ours[-11]
    with pytest.raises(AssertionError, match="should not be an empty iterable"):
        ConcatDataset([])
    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        ConcatDataset([IterableDataset()])


def test_dataset_add_and_base_errors() -> None:
    class Squares(Dataset[int]):
        def __getitem__(self, i: int) -> int:
            return i * i

        def __len__(self) -> int:
            return 4

    both = Squares() + Squares()
    assert isinstance(both, ConcatDataset)
    assert [both[i] for i in range(8)] == [0, 1, 4, 9] * 2
    with pytest.raises(NotImplementedError):
        Dataset()[0]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(-(2**63), 2**64 - 1),
    n=st.integers(0, 200),
    data=st.data(),
    as_fractions=st.booleans(),
)
def test_random_split_matches_torch(
    seed: int, n: int, data: st.DataObject, as_fractions: bool
) -> None:
    if as_fractions:
        k = data.draw(st.integers(1, 5))
        raw = data.draw(st.lists(st.integers(1, 10), min_size=k, max_size=k))
        lengths = [r / sum(raw) for r in raw]
        if not (np.isclose(sum(lengths), 1) and sum(lengths) <= 1):
            return
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
        bounds = [0, *cuts, n]
        lengths = [b - a for a, b in itertools.pairwise(bounds)]
    dataset = list(range(n))
    g, t = Generator(seed), torch.Generator().manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-length fraction splits warn in both
        ours = random_split(dataset, lengths, generator=g)
        ref = tud.random_split(dataset, lengths, generator=t)
    assert [list(s) for s in ours] == [list(s) for s in ref]
    assert [s.indices for s in ours] == [s.indices for s in ref]
    np.testing.assert_array_equal(g.get_state(), t.get_state().numpy())


def test_random_split_default_generator_and_errors() -> None:
    with global_rngs():
        torch.manual_seed(7)
        G.manual_seed(7)
        ours = random_split(range(30), [0.5, 0.3, 0.2])
        ref = tud.random_split(range(30), [0.5, 0.3, 0.2])
        assert [list(s) for s in ours] == [list(s) for s in ref]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(range(5), [2, 2])
    with pytest.raises(ValueError, match="Fraction at index 0"):
        random_split(range(5), [1.5, -0.5])
