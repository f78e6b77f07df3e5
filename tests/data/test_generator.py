"""jax_impl.random against torch.Generator (CPU), run side by side."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jax_impl.data
import jax_impl.data.generator
from jax_impl import random as G
from jax_impl.random import Generator, _torch_rng
from jax_impl.random.generator import _randperm_uses_random64

# Seeds torch accepts: negatives (two's complement), > 2**32 (only the low 32
# bits seed MT19937), and the edges.
seeds = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from(
        [0, 1, -1, 42, 2**32 + 5, 2**63, 2**64 - 1, -(2**63), 67280421310721]
    ),
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


def pair(seed: int) -> tuple[Generator, torch.Generator]:
    return Generator().manual_seed(seed), torch.Generator().manual_seed(seed)


def assert_same_state(g: Generator, t: torch.Generator) -> None:
    np.testing.assert_array_equal(g.get_state(), t.get_state().numpy())


def test_fresh_generator_matches_torch() -> None:
    g, t = Generator(), torch.Generator()
    assert g.initial_seed() == t.initial_seed() == G.DEFAULT_SEED
    assert_same_state(g, t)
    np.testing.assert_array_equal(
        g.randperm(50), torch.randperm(50, generator=t).numpy()
    )
    assert_same_state(g, t)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, n=st.integers(0, 1500))
def test_raw_draws_and_state_bytes(seed: int, n: int) -> None:
    g, t = pair(seed)
    assert g.initial_seed() == t.initial_seed()
    assert_same_state(g, t)
    # randint with a range below 2**28 is ``random() % range``.
    u32 = g.random_u32(n).astype(np.int64) % (2**28 - 1)
    np.testing.assert_array_equal(
        u32, torch.randint(0, 2**28 - 1, (n,), generator=t).numpy()
    )
    assert_same_state(g, t)
    # int64 random_() is ``random64() % 2**63``.
    u64 = g.random_u64(n) % np.uint64(2**63)
    ref = torch.empty(n, dtype=torch.int64).random_(generator=t).numpy()
    np.testing.assert_array_equal(u64.astype(np.int64), ref)
    assert (
        g.random_int64()
        == torch.empty((), dtype=torch.int64).random_(generator=t).item()
    )
    assert_same_state(g, t)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=3))
def test_randperm_consecutive_calls(seed: int, sizes: list[int]) -> None:
    g, t = pair(seed)
    for n in sizes:  # one generator reused: every draw count must match
        np.testing.assert_array_equal(
            g.randperm(n), torch.randperm(n, generator=t).numpy()
        )
    assert_same_state(g, t)


@pytest.mark.parametrize("n", [1, 2, 3, 624, 625, 54321, 60000])
def test_randperm_sizes(n: int) -> None:
    g, t = pair(n * 7919)
    out = g.randperm(n)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, torch.randperm(n, generator=t).numpy())
    assert_same_state(g, t)


def test_randperm_branch_threshold() -> None:
    # randperm_cpu: the old swap loop "for small n", n < (2**32 - 1) // 20.
    assert not _randperm_uses_random64(214_748_363)
    assert _randperm_uses_random64(214_748_364)


@settings(max_examples=25, deadline=None)
@given(seed=seeds, n=st.integers(1, 400))
def test_vectorised_loops_match_torch_loops(seed: int, n: int) -> None:
    """Both vectorised randperm loops equal a literal transcription of randperm_cpu."""
    g = Generator(seed)
    z = g.random_u64(n) % np.arange(1, n + 1, dtype=np.uint64)
    r = [0] * n
    for i in range(n):  # inside-out branch: r[i] = r[z]; r[z] = i
        k = int(z[i])
        r[i] = r[k]
        r[k] = i
    np.testing.assert_array_equal(_torch_rng.randperm_inside_out(z, n), r)
    zs = g.random_u32(n - 1) % np.arange(n, 1, -1, dtype=np.uint32)
    s = list(range(n))
    for i in range(n - 1):  # swap branch
        j = i + int(zs[i])
        s[i], s[j] = s[j], s[i]
    small_n = _torch_rng._SMALL_N
    try:
        _torch_rng._SMALL_N = 0  # force the vectorised path for every n
        np.testing.assert_array_equal(_torch_rng.randperm_swap(zs, n), s)
    finally:
        _torch_rng._SMALL_N = small_n
    np.testing.assert_array_equal(_torch_rng.randperm_swap(zs, n), s)


@pytest.mark.parametrize("seed", [0, 5, 2**32 + 5, 2**64 - 1])
def test_init_genrand_fallback_matches_torch(seed: int) -> None:
    """The RandomState-based seeding (used when numpy lacks _legacy_seeding)."""
    state = _torch_rng.init_genrand(seed)["state"]
    ref = np.frombuffer(
        torch.Generator().manual_seed(seed).get_state().numpy().tobytes(),
        dtype=_torch_rng.STATE_DTYPE,
    )[0]
    np.testing.assert_array_equal(state["key"], ref["state"].astype(np.uint32))
    assert state["pos"] == 625 - ref["left"]


@settings(max_examples=30, deadline=None)
@given(
    seed=seeds,
    low=st.integers(-(2**40), 2**40),
    span=st.one_of(
        st.integers(1, 100),
        st.integers(1, 2**33),
        st.sampled_from([2**28 - 1, 2**28, 2**32]),
    ),
    size=st.lists(st.integers(0, 6), min_size=0, max_size=3),
)
def test_randint(seed: int, low: int, span: int, size: list[int]) -> None:
    g, t = pair(seed)
    ours = g.randint(low, low + span, tuple(size))
    ref = torch.randint(low, low + span, tuple(size), generator=t).numpy()
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(
        g.randint(span, size=3), torch.randint(span, (3,), generator=t)
    )
    assert_same_state(g, t)


@settings(max_examples=20, deadline=None)
@given(seed=seeds, size=st.lists(st.integers(0, 40), min_size=1, max_size=2))
def test_rand_float32(seed: int, size: list[int]) -> None:
    g, t = pair(seed)
    ours = g.rand(tuple(size))
    ref = torch.rand(tuple(size), generator=t).numpy()
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref)
    assert_same_state(g, t)


@settings(max_examples=30, deadline=None)
@given(
    seed=seeds,
    weights=st.lists(st.floats(0, 10, allow_subnormal=False), min_size=1, max_size=40),
    num_samples=st.integers(1, 50),
    replacement=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_multinomial(
    seed: int, weights: list[float], num_samples: int, replacement: bool, dtype: type
) -> None:
    w = np.asarray(weights, dtype=dtype)
    positive = int((w > 0).sum())
    if positive == 0 or (not replacement and num_samples > positive):
        return  # torch raises / would order zero-weight ties arbitrarily
    if not replacement and len(np.unique(w[w > 0])) < positive:
        return  # equal keys are ordered by topk, unspecified
    g, t = pair(seed)
    ours = g.multinomial(w, num_samples, replacement)
    ref = torch.multinomial(
        torch.from_numpy(w), num_samples, replacement, generator=t
    ).numpy()
    np.testing.assert_array_equal(ours, ref)
    assert_same_state(g, t)


@settings(max_examples=15, deadline=None)
@given(seed=seeds, draws=st.integers(0, 2000), normals=st.integers(0, 3))
def test_state_round_trip_both_ways(seed: int, draws: int, normals: int) -> None:
    t = torch.Generator().manual_seed(seed)
    torch.randperm(draws, generator=t)
    # torch caches a spare normal sample: the state bytes carry it.
    torch.randn(normals, generator=t)
    torch.randn(normals, dtype=torch.float64, generator=t)
    g = Generator().set_state(t.get_state().numpy())
    assert_same_state(g, t)
    assert g.initial_seed() == t.initial_seed()
    np.testing.assert_array_equal(
        g.randperm(700), torch.randperm(700, generator=t).numpy()
    )
    assert_same_state(g, t)
    g.random_u32(draws)
    t2 = torch.Generator()
    t2.set_state(torch.from_numpy(g.get_state()))
    assert_same_state(g, t2)
    np.testing.assert_array_equal(g.rand(33), torch.rand(33, generator=t2).numpy())


def test_set_state_errors_match_torch() -> None:
    for bad in (np.zeros(10, np.uint8), np.zeros(5056, np.uint8)):
        with pytest.raises(RuntimeError) as ours:
            Generator().set_state(bad)
        with pytest.raises(RuntimeError) as ref:
            torch.Generator().set_state(torch.from_numpy(bad))
        assert str(ours.value) in str(ref.value)


def test_manual_seed_errors_match_torch() -> None:
    for bad in (1.5, True):
        with pytest.raises(RuntimeError):
            torch.Generator().manual_seed(bad)
        with pytest.raises(RuntimeError):
            Generator().manual_seed(bad)
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError):
            torch.Generator().manual_seed(bad)
        with pytest.raises(ValueError):
            Generator().manual_seed(bad)


def test_seed_is_fresh_and_recorded() -> None:
    g = Generator()
    s = g.seed()
    assert g.initial_seed() == s
    np.testing.assert_array_equal(g.randperm(20), Generator(s).randperm(20))


@settings(max_examples=10, deadline=None)
@given(seed=seeds)
def test_global_generator_matches_torch(seed: int) -> None:
    with global_rngs():
        torch.manual_seed(seed)
        G.manual_seed(seed)
        assert G.initial_seed() == torch.initial_seed()
        np.testing.assert_array_equal(G.get_rng_state(), torch.get_rng_state().numpy())
        assert (
            G.default_generator.random_int64()
            == torch.empty((), dtype=torch.int64).random_().item()
        )
        np.testing.assert_array_equal(
            G.default_generator.randperm(99), torch.randperm(99)
        )
        np.testing.assert_array_equal(G.get_rng_state(), torch.get_rng_state().numpy())


def test_old_paths_name_the_same_generator() -> None:
    """``jax_impl.data`` and ``jax_impl.data.generator`` re-export ``jax_impl.random``'s objects, not copies."""
    for module in (jax_impl.data, jax_impl.data.generator):
        assert module.Generator is G.Generator
        assert module.default_generator is G.default_generator
        assert module.manual_seed is G.manual_seed
    assert jax_impl.data.generator.get_rng_state is G.get_rng_state


def test_masks_drawn_ahead_keep_torchs_stream():
    """The engine draws the next dropout-sized mask, or list of masks (``bernoulli_many``, a jitted step's),
    ahead on a background thread; interleaved with other draws, reseeding and state reads in a seeded
    random order, every mask and every state stays torch's."""
    rng = np.random.default_rng(0)
    large = (_torch_rng.DRAW_AHEAD_MIN + 17,)
    plan = [(large, 0.1), ((10, 10), 0.3), ((300, 257), 0.5), (large, 0.1)]
    for trial in range(12):
        ours, theirs = Generator(), torch.Generator()
        ours.manual_seed(trial)
        theirs.manual_seed(trial)
        for _ in range(14):
            op = int(rng.integers(0, 8))
            if op == 7:
                expected = [torch.empty(shape).bernoulli_(p, generator=theirs).bool().numpy() for shape, p in plan]
                for mine, want in zip(ours.bernoulli_many(plan), expected, strict=True):
                    np.testing.assert_array_equal(mine, want)
            elif op <= 2:  # the repeating pattern a step draws, and a small mask that is never drawn ahead
                shape, p = [(large, 0.75), ((300, 257), 0.5), ((10, 10), 0.3)][op]
                expected = torch.empty(shape).bernoulli_(p, generator=theirs).bool().numpy()
                np.testing.assert_array_equal(ours.bernoulli(shape, p), expected)
            elif op == 3:
                np.testing.assert_array_equal(ours.randperm(50), torch.randperm(50, generator=theirs).numpy())
            elif op == 4:
                np.testing.assert_array_equal(np.asarray(ours.get_state()), theirs.get_state().numpy())
            elif op == 5:
                seed = int(rng.integers(0, 2**31))
                ours.manual_seed(seed)
                theirs.manual_seed(seed)
            else:
                state = theirs.get_state()
                ours.set_state(state)
                theirs.set_state(state)
        np.testing.assert_array_equal(np.asarray(ours.get_state()), theirs.get_state().numpy())


def test_bernoulli_threshold_on_crafted_words():
    """The integer comparison behind ``bernoulli`` is torch's ``(r & (2**53 - 1)) * 2**-53 < p`` in double,
    including the pairs whose high 21 bits tie with the threshold's (one in 2**21 of torch's draws; crafted
    here) and p = 0 and 1."""
    rng = np.random.default_rng(7)
    for p in [0.0, 1.0, 0.5, 0.75, 0.1, 0.9, 1 / 3, *rng.random(20)]:
        t = math.ceil(p * 2.0**53)
        words = rng.integers(0, 2**32, 2 * 4096, dtype=np.uint32)
        hi_tie = (t >> 32) | (rng.integers(0, 2**11, 1024, dtype=np.uint32) << 21)  # same low 21 bits
        words[0:2048:2] = hi_tie
        words[1:2048:2] = np.uint32(t & (2**32 - 1)) + rng.integers(-2, 3, 1024).astype(np.uint32)
        r = (words[0::2].astype(np.uint64) << np.uint64(32)) | words[1::2].astype(np.uint64)
        want = (r & np.uint64(2**53 - 1)).astype(np.float64) * 2.0**-53 < p
        np.testing.assert_array_equal(_torch_rng._bernoulli_bits(words, p), want)


@pytest.mark.parametrize("seed", range(4))
def test_bernoulli_matches_torch_for_drawn_probabilities(seed):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        p, n = float(rng.random()), int(rng.integers(1, 70000))
        ours, theirs = Generator(seed), torch.Generator().manual_seed(seed)
        want = torch.empty(n).bernoulli_(p, generator=theirs).bool().numpy()
        np.testing.assert_array_equal(ours.bernoulli(n, p), want)
        np.testing.assert_array_equal(ours.get_state(), theirs.get_state().numpy())
