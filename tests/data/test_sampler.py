"""Samplers' index streams against torch.utils.data, run side by side."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_impl.data import generator as G
from jax_impl.data.distributed import DistributedSampler
from jax_impl.data.generator import Generator
from jax_impl.data.sampler import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

seeds = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([0, 1, -1, 2**32 + 5]),
)


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


def assert_same_state(g: Generator, t: torch.Generator) -> None:
    np.testing.assert_array_equal(g.get_state(), t.get_state().numpy())


@settings(max_examples=50, deadline=None)
@given(
    seed=seeds,
    n=st.integers(1, 300),
    num_samples=st.one_of(st.none(), st.integers(1, 700)),
    replacement=st.booleans(),
    epochs=st.integers(1, 3),
)
def test_random_sampler_explicit_generator(
    seed: int, n: int, num_samples: int | None, replacement: bool, epochs: int
) -> None:
    g, t = Generator(seed), torch.Generator().manual_seed(seed)
    ours = RandomSampler(range(n), replacement, num_samples, generator=g)
    ref = tud.RandomSampler(range(n), replacement, num_samples, generator=t)
    assert len(ours) == len(ref)
    for _ in range(epochs):  # one generator reused across epochs
        assert list(ours) == list(ref)
        assert_same_state(g, t)


@settings(max_examples=50, deadline=None)
@given(
    seed=seeds,
    n=st.integers(1, 200),
    replacement=st.booleans(),
    epochs=st.integers(1, 3),
)
def test_random_sampler_global_generator(
    seed: int, n: int, replacement: bool, epochs: int
) -> None:
    with global_rngs():
        torch.manual_seed(seed)
        G.manual_seed(seed)
        ours = RandomSampler(range(n), replacement)
        ref = tud.RandomSampler(range(n), replacement)
        for _ in range(epochs):
            it_ours, it_ref = iter(ours), iter(ref)
            # the seed draw is lazy: nothing is consumed before the first next()
            np.testing.assert_array_equal(
                G.get_rng_state(), torch.get_rng_state().numpy()
            )
            assert list(it_ours) == list(it_ref)
            np.testing.assert_array_equal(
                G.get_rng_state(), torch.get_rng_state().numpy()
            )


@settings(max_examples=50, deadline=None)
@given(
    seed=seeds,
    indices=st.lists(st.integers(-50, 50), max_size=60),
    epochs=st.integers(1, 2),
)
def test_subset_random_sampler(seed: int, indices: list[int], epochs: int) -> None:
    g, t = Generator(seed), torch.Generator().manual_seed(seed)
    ours, ref = SubsetRandomSampler(indices, g), tud.SubsetRandomSampler(indices, t)
    for _ in range(epochs):
        assert list(ours) == list(ref)
    assert len(ours) == len(ref)
    with global_rngs():  # generator=None draws the permutation from the global stream
        torch.manual_seed(seed)
        G.manual_seed(seed)
        assert list(SubsetRandomSampler(indices)) == list(
            tud.SubsetRandomSampler(indices)
        )


@settings(max_examples=50, deadline=None)
@given(
    seed=seeds,
    weights=st.lists(st.floats(0.01, 5), min_size=1, max_size=30, unique=True),
    num_samples=st.integers(1, 60),
    replacement=st.booleans(),
)
def test_weighted_random_sampler(
    seed: int, weights: list[float], num_samples: int, replacement: bool
) -> None:
    if not replacement:
        num_samples = min(num_samples, len(weights))
    g, t = Generator(seed), torch.Generator().manual_seed(seed)
    ours = WeightedRandomSampler(weights, num_samples, replacement, g)
    ref = tud.WeightedRandomSampler(weights, num_samples, replacement, t)
    for _ in range(2):
        assert list(ours) == list(ref)
    assert len(ours) == len(ref)


@settings(max_examples=50, deadline=None)
@given(
    seed=seeds,
    n=st.integers(1, 100),
    batch_size=st.integers(1, 40),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_batch_sampler(
    seed: int, n: int, batch_size: int, drop_last: bool, shuffle: bool
) -> None:
    g, t = Generator(seed), torch.Generator().manual_seed(seed)
    if shuffle:
        inner, inner_ref = (
            RandomSampler(range(n), generator=g),
            tud.RandomSampler(range(n), generator=t),
        )
    else:
        inner, inner_ref = SequentialSampler(range(n)), tud.SequentialSampler(range(n))
    ours = BatchSampler(inner, batch_size, drop_last)
    ref = tud.BatchSampler(inner_ref, batch_size, drop_last)
    assert len(ours) == len(ref)
    for _ in range(2):
        assert list(ours) == list(ref)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 120),
    world=st.integers(1, 8),
    data=st.data(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**40),
    drop_last=st.booleans(),
)
def test_distributed_sampler(
    n: int, world: int, data: st.DataObject, shuffle: bool, seed: int, drop_last: bool
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    ours = DistributedSampler(range(n), world, rank, shuffle, seed, drop_last)
    ref = tud.DistributedSampler(range(n), world, rank, shuffle, seed, drop_last)
    assert len(ours) == len(ref)
    for epoch in (0, 1, 7):
        ours.set_epoch(epoch)
        ref.set_epoch(epoch)
        assert list(ours) == list(ref)


def test_distributed_sampler_defaults_from_jax() -> None:
    import jax

    s = DistributedSampler(range(10))
    assert (s.num_replicas, s.rank) == (jax.process_count(), jax.process_index())
    assert list(s) == list(tud.DistributedSampler(range(10), num_replicas=1, rank=0))


def _error(fn) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    ("ours", "ref"),
    [
        (
            lambda: RandomSampler(range(3), replacement=1),
            lambda: tud.RandomSampler(range(3), replacement=1),
        ),
        (
            lambda: RandomSampler(range(3), num_samples=0),
            lambda: tud.RandomSampler(range(3), num_samples=0),
        ),
        (lambda: RandomSampler([]), lambda: tud.RandomSampler([])),
        (
            lambda: BatchSampler(range(3), 0, False),
            lambda: tud.BatchSampler(range(3), 0, False),
        ),
        (
            lambda: BatchSampler(range(3), True, False),
            lambda: tud.BatchSampler(range(3), True, False),
        ),
        (
            lambda: BatchSampler(range(3), 2, 1),
            lambda: tud.BatchSampler(range(3), 2, 1),
        ),
        (
            lambda: WeightedRandomSampler([1.0], 0),
            lambda: tud.WeightedRandomSampler([1.0], 0),
        ),
        (
            lambda: WeightedRandomSampler([1.0], 2, replacement=0),
            lambda: tud.WeightedRandomSampler([1.0], 2, replacement=0),
        ),
        (
            lambda: WeightedRandomSampler([[1.0]], 2),
            lambda: tud.WeightedRandomSampler([[1.0]], 2),
        ),
        (
            lambda: DistributedSampler(range(3), 2, 2),
            lambda: tud.DistributedSampler(range(3), 2, 2),
        ),
    ],
)
def test_validation_errors_match_torch(ours, ref) -> None:
    assert _error(ours) == _error(ref)
