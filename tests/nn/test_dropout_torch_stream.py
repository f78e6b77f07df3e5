"""Dropout masks from torch's generator, against torch's CPU dropout run in the test.

After ``torch.manual_seed(s)`` and ``jax_impl.random.manual_seed(s)`` the
outputs must be bit-identical (mask, scale and ``x * noise``), and the next
``torch.randperm(10)`` must equal ours: the global generator is consumed as
torch consumes it. No tolerance anywhere: every comparison is bitwise.
"""

from __future__ import annotations

import warnings
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as nn
import jax_impl.nn.functional as F
import jax_impl.random as jr

PS = [0.1, 0.25, 0.5, 0.9]
DTYPES = [np.float32, np.float64]
# Odd sizes, and sizes past 800 and 10,000 elements (any chunking of a parallel kernel would show there).
SHAPES = [(1,), (7,), (13, 17), (3, 5, 7, 11), (10007,), (4, 3, 29, 31)]
FEATURE_CASES = [  # (function name, input shape): batched, unbatched, and 10,000+ channel draws
    ("dropout1d", (5, 13)), ("dropout1d", (3, 7, 9)), ("dropout1d", (101, 103, 2)),
    ("dropout2d", (3, 7, 5, 4)), ("dropout2d", (2, 5, 9)), ("dropout2d", (97, 107, 1, 2)),
    ("dropout3d", (4, 3, 2, 5)), ("dropout3d", (2, 3, 4, 2, 3)), ("dropout3d", (103, 101, 1, 1, 2)),
]
MODULES = {"dropout": "Dropout", "dropout1d": "Dropout1d", "dropout2d": "Dropout2d", "dropout3d": "Dropout3d"}


def _assert_bits_equal(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    uint = np.dtype(f"uint{8 * got.dtype.itemsize}")
    np.testing.assert_array_equal(got.view(uint), want.view(uint))


def _case_seed(*case) -> int:
    return zlib.crc32(repr(case).encode())


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    jr.manual_seed(seed)


def _assert_same_generator_position() -> None:
    """The next randperm(10) agrees, and so do the whole generator states."""
    np.testing.assert_array_equal(jr.default_generator.get_state(), torch.get_rng_state().numpy())
    np.testing.assert_array_equal(jr.default_generator.randperm(10), torch.randperm(10).numpy())


def _input(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("shape", SHAPES)
def test_functional_dropout_is_torchs(shape, p, dtype):
    seed = _case_seed(shape, p)
    x = _input(shape, dtype, seed)
    with jax.enable_x64(dtype == np.float64):
        _seed(seed)
        got = F.dropout(x, p)
        want = torch.nn.functional.dropout(torch.from_numpy(x), p).numpy()
        _assert_bits_equal(got, want)
        _assert_same_generator_position()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("name, shape", FEATURE_CASES)
def test_feature_dropout_is_torchs(name, shape, p, dtype):
    seed = _case_seed(name, shape, p)
    x = _input(shape, dtype, seed)
    with jax.enable_x64(dtype == np.float64), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dropout2d's 3-D warning, on both sides
        _seed(seed)
        got = getattr(F, name)(x, p)
        want = getattr(torch.nn.functional, name)(torch.from_numpy(x), p).numpy()
        _assert_bits_equal(got, want)
        _assert_same_generator_position()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, shape", [("dropout", (6, 1001)), *FEATURE_CASES[:2], FEATURE_CASES[3], FEATURE_CASES[6]])
def test_modules_draw_torchs_masks_call_after_call(name, shape, dtype):
    seed = _case_seed(name, shape)
    x = _input(shape, dtype, seed)
    with jax.enable_x64(dtype == np.float64):
        for p in PS:
            _seed(seed)
            ours, theirs = getattr(nn, MODULES[name])(p), getattr(torch.nn, MODULES[name])(p)
            for _ in range(2):
                _assert_bits_equal(ours(x), theirs(torch.from_numpy(x)).numpy())
            _assert_same_generator_position()
            ours.eval()
            theirs.eval()
            _assert_bits_equal(ours(x), theirs(torch.from_numpy(x)).numpy())
            _assert_same_generator_position()


@pytest.mark.parametrize("dtype", DTYPES)
def test_jitted_calls_draw_torchs_masks_in_order(dtype):
    """Three jitted calls dispatched without blocking, then a host draw: torch's order."""
    x = _input((37, 29), dtype, 0)
    with jax.enable_x64(dtype == np.float64):
        for p in PS:
            step = jax.jit(lambda v, p=p: F.dropout(v, p))
            feature_step = jax.jit(lambda v, p=p: F.dropout2d(v, p))
            _seed(17)
            got = [step(x), feature_step(x[None, None]), step(x)]
            perm = jr.default_generator.randperm(10)  # waits for the dispatched draws
            xt = torch.from_numpy(x)
            want = [
                torch.nn.functional.dropout(xt, p), torch.nn.functional.dropout2d(xt[None, None], p),
                torch.nn.functional.dropout(xt, p),
            ]
            np.testing.assert_array_equal(perm, torch.randperm(10).numpy())
            for g, w in zip(got, want):
                _assert_bits_equal(g, w.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_jitted_value_and_grad_matches_torch_autograd(dtype):
    """Forward and backward of ``sum(dropout(x) * w)`` in one jitted step: elementwise, so bitwise."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 8, 50)).astype(dtype), rng.standard_normal((3, 8, 50)).astype(dtype)
    with jax.enable_x64(dtype == np.float64):

        def loss(x, w, module):
            return jnp.sum(module(x) * w)

        _seed(5)
        module = nn.Dropout(0.25)
        step = nnx.jit(lambda x, w, m: jax.value_and_grad(loss, argnums=(0, 1))(x, w, m))
        got = [step(x, w, module) for _ in range(2)]
        theirs = torch.nn.Dropout(0.25)
        for value, (gx, gw) in got:
            xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
            out = theirs(xt)
            (out * wt).sum().backward()
            _assert_bits_equal(gx, xt.grad.numpy())
            _assert_bits_equal(gw, out.detach().numpy())
        _assert_same_generator_position()


def test_construction_draws_nothing_and_linear_init_stays_torchs():
    _seed(11)
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Dropout(0.3), torch.nn.Dropout2d(), torch.nn.Linear(7, 3))
    ours = nn.Sequential(nn.Linear(5, 7), nn.Dropout(0.3), nn.Dropout2d(), nn.Linear(7, 3))
    for index in (0, 3):
        _assert_bits_equal(ours[index].weight[...], theirs[index].weight.detach().numpy())
        _assert_bits_equal(ours[index].bias[...], theirs[index].bias.detach().numpy())
    _assert_same_generator_position()


@pytest.mark.parametrize("p", [0.0, 1.0])
@pytest.mark.parametrize("name", list(MODULES))
def test_edge_probabilities_eval_and_empty_draw_nothing(name, p):
    x = np.array([[[-1.5, 0.0, np.nan, 2.0]] * 3] * 2, np.float32)  # (2, 3, 4): negatives, NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _seed(3)
        cases = [(x, p, True), (x, 0.5, False), (np.zeros((0, 3, 4), np.float32), 0.5, True)]
        for v, prob, training in cases:
            got = getattr(F, name)(v, prob, training)
            want = getattr(torch.nn.functional, name)(torch.from_numpy(v), prob, training).numpy()
            _assert_bits_equal(got, want)
        _assert_same_generator_position()


def test_torchs_own_masks_do_not_depend_on_the_thread_count():
    """torch's CPU bernoulli_ is a serial loop: 1 and 2 threads give the same masks, ours among them."""
    x = _input((20011,), np.float32, 2)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            torch.manual_seed(9)
            results.append(torch.nn.functional.dropout(torch.from_numpy(x), 0.5).numpy())
    finally:
        torch.set_num_threads(threads)
    _assert_bits_equal(results[0], results[1])
    jr.manual_seed(9)
    _assert_bits_equal(F.dropout(x, 0.5), results[0])


def test_inplace_is_accepted_and_matches_torch():
    x = _input((5, 6, 7), np.float32, 4)
    _seed(8)
    got = F.dropout(x, 0.4, True, True)
    want = torch.nn.functional.dropout(torch.from_numpy(x.copy()), 0.4, True, True).numpy()
    _assert_bits_equal(got, want)
    got = nn.Dropout1d(0.4, inplace=True)(x)
    want = torch.nn.Dropout1d(0.4, inplace=True)(torch.from_numpy(x.copy())).numpy()
    _assert_bits_equal(got, want)
    _assert_same_generator_position()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.bool])
def test_generator_bernoulli_is_torchs_bernoulli_(dtype):
    """``Generator.bernoulli`` and its staged form against ``empty(size, dtype).bernoulli_(p, generator=g)``."""
    for seed, size, p in [(0, (3, 7), 0.3), (1, (10007,), 0.9), (2, (801,), 0.5), (3, (4, 0), 0.5)]:
        ours, theirs = jr.Generator(seed), torch.Generator().manual_seed(seed)
        want = torch.empty(size, dtype=dtype).bernoulli_(p, generator=theirs).bool().numpy()
        np.testing.assert_array_equal(ours.bernoulli(size, p), want)
        want = torch.empty(size, dtype=dtype).bernoulli_(p, generator=theirs).bool().numpy()
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda: ours.staged_bernoulli(size, p))()), want)
        np.testing.assert_array_equal(ours.get_state(), theirs.get_state().numpy())


def test_bad_probabilities_and_ranks_raise_like_torch():
    def messages(call_ours, call_theirs, error):
        with pytest.raises(error) as theirs:
            call_theirs()
        with pytest.raises(error) as ours:
            call_ours()
        assert str(ours.value) == str(theirs.value)

    messages(lambda: jr.Generator(0).bernoulli(3, 1.5), lambda: torch.empty(3).bernoulli_(1.5), RuntimeError)
    messages(lambda: F.dropout1d(np.ones(4), 0.5), lambda: torch.nn.functional.dropout1d(torch.ones(4), 0.5), RuntimeError)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        messages(lambda: F.dropout2d(np.ones(4), 0.5), lambda: torch.nn.functional.dropout2d(torch.ones(4), 0.5),
                 RuntimeError)


@pytest.mark.parametrize("name, ndim", [("dropout2d", 3), ("dropout2d", 2), ("dropout2d", 5), ("dropout3d", 3)])
def test_rank_warnings_are_torchs(name, ndim):
    x = np.ones((2,) * ndim, np.float32)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        getattr(torch.nn.functional, name)(torch.from_numpy(x), 0.5)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        getattr(F, name)(x, 0.5)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]


def test_explicit_rngs_leave_the_global_generator_alone():
    """``rngs=`` selects jax keys: the global stream (torch's) is not touched."""
    _seed(6)
    before = torch.get_rng_state().numpy()
    module = nn.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
    module(np.ones((4, 5), np.float32))
    F.dropout(np.ones(7), 0.5, rng=jax.random.key(1))
    np.testing.assert_array_equal(jr.default_generator.get_state(), before)


def test_vmap_refuses_torchs_stream_as_torch_func_vmap_does():
    """torch.func.vmap's default randomness='error' refuses dropout; ours raises too (one shared mask would differ)."""
    x = np.ones((3, 4), np.float32)
    with pytest.raises(RuntimeError):
        torch.func.vmap(lambda v: torch.nn.functional.dropout(v, 0.5))(torch.from_numpy(x))
    with pytest.raises(ValueError, match="vmap"):
        jax.vmap(lambda v: F.dropout(v, 0.5))(x)
    keys = jax.random.split(jax.random.key(0), 3)
    assert jax.vmap(lambda v, k: F.dropout(v, 0.5, rng=k))(x, keys).shape == x.shape


def test_forked_child_draws_without_waiting_on_its_parents_runtime():
    """A DataLoader worker forked after a jitted dropout seeds and draws at once, with torch's numbers."""
    import os
    import select
    import signal

    jax.jit(lambda v: F.dropout(v, 0.5))(np.ones(8, np.float32)).block_until_ready()  # a staged draw
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # os.fork() in a multithreaded process
        pid = os.fork()
    if pid == 0:  # the child: what jax_impl.data's worker loop does first
        try:
            jr.manual_seed(123)
            os.write(write_end, jr.default_generator.randperm(10).astype(np.int64).tobytes())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 60)  # measured: well under a second
        got = np.frombuffer(os.read(read_end, 80), np.int64) if ready else None
    finally:
        os.close(read_end)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert got is not None, "the forked child hung on its parent's effects barrier"
    torch.manual_seed(123)
    np.testing.assert_array_equal(got, torch.randperm(10).numpy())
