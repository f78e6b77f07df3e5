"""jax_impl.sorting against torch 2.13's CPU kernels: ``sort(stable=False)``/``argsort`` and ``topk`` indices
equal torch's exactly among ties (NaN, ``-0.0``/``0.0``, infinities), in both topk branches
(``std::partial_sort`` when ``k * 64 <= n``, ``std::nth_element`` otherwise) and with ``sorted=False``;
``torch_sort``/``torch_topk`` values and gradients bit-identical to torch's through ``jit`` and ``vmap``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl.sorting import argsort, cpu_sort_order, cpu_topk_order, nth_element, std_sort, topk_indices
from jax_impl.tensor_ops import torch_sort, torch_topk


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


_TORCH_DTYPES = {np.float32: torch.float32, np.float64: torch.float64, np.int64: torch.int64}


def _tied(rng: np.random.Generator, shape, dtype, specials: bool) -> np.ndarray:
    """Integers from a small range (ties everywhere); floats also get NaN, +-inf and -0.0 when ``specials``."""
    x = rng.integers(-int(rng.integers(1, 12)), int(rng.integers(1, 12)), shape).astype(dtype)
    if specials and np.issubdtype(dtype, np.floating):
        for value, share in ((np.nan, 0.1), (np.inf, 0.05), (-np.inf, 0.05), (-0.0, 0.1)):
            x[rng.random(shape) < share] = value
    return x


def _cases(seed: int, count: int, max_n: int):
    """Seeded 1-D cases: ``n`` spread over 1..max_n, one of three dtypes, specials in half of them."""
    rng = np.random.default_rng(seed)
    dtypes = list(_TORCH_DTYPES)
    for i in range(count):
        n = int(rng.integers(1, 80)) if i % 3 == 0 else int(rng.integers(1, max_n + 1))
        yield rng, _tied(rng, (n,), dtypes[i % 3], bool(i % 2))


def _check_sort(x: np.ndarray, descending: bool) -> None:
    expected = torch.sort(torch.from_numpy(x), descending=descending).indices.numpy()
    np.testing.assert_array_equal(cpu_sort_order(x, descending), expected)


def _check_topk(x: np.ndarray, k: int, largest: bool, sorted_: bool) -> None:
    expected = torch.topk(torch.from_numpy(x), k, -1, largest, sorted_).indices.numpy()
    np.testing.assert_array_equal(cpu_topk_order(x, k, largest, sorted_), expected)


def _ks(rng: np.random.Generator, n: int) -> list[int]:
    """A k for each topk branch: ``k * 64 <= n`` (partial_sort) when possible, and any k up to n."""
    return sorted({int(rng.integers(0, n // 64 + 1)), int(rng.integers(0, n + 1)), n})


def test_sort_order_is_torch_std_sort():
    """1-D tied inputs, n up to 2000 (introsort's partitions, heapsort fallback not reached at these sizes,
    final insertion sort): every index equal to torch's unstable sort."""
    for i, (_, x) in enumerate(_cases(0, 40, 2000)):
        _check_sort(x, descending=bool(i % 2))


def test_topk_order_is_torch_partial_sort_and_nth_element():
    """Both topk branches, largest/smallest, sorted or not: every index equal to torch's."""
    for i, (rng, x) in enumerate(_cases(1, 40, 2000)):
        for k in _ks(rng, x.shape[0]):
            _check_topk(x, k, largest=bool(i % 2), sorted_=bool(i // 2 % 2))


def test_sort_order_without_ties_and_short_slices_is_stable():
    """No ties, or at most 16 elements (std::sort is an insertion sort there): the stable order, torch's."""
    rng = np.random.default_rng(2)
    for n in (1, 2, 16, 300):
        x = rng.permutation(n).astype(np.float64)
        _check_sort(x, True)
        _check_topk(x, max(n // 2, 1), True, False)
    _check_sort(_tied(rng, (16,), np.float64, True), False)


def test_radix_sort_path_is_stable():
    """A 1-D integer tensor of at least 32768 elements sorted ascending goes to fbgemm's (stable) radix sort."""
    x = np.random.default_rng(3).integers(0, 4, 40000)
    expected = torch.sort(torch.from_numpy(x)).indices.numpy()
    np.testing.assert_array_equal(np.asarray(argsort(jnp.asarray(x.astype(np.int32)))), expected)


def _grad_pair(torch_fns, jax_fns, x: np.ndarray):
    """Each function's ``(values, indices)`` and the gradient of ``sum_f sum(values_f * w_f)`` for fixed
    weights ``w_f``, in both frameworks (one ``jit`` for all the jax functions)."""
    t = torch.from_numpy(x).requires_grad_(True)
    outs = [fn(t) for fn in torch_fns]
    weights = [torch.linspace(-1.0, 2.0, v.numel(), dtype=t.dtype).reshape(v.shape) for v, _ in outs]
    sum((v * w).sum() for (v, _), w in zip(outs, weights)).backward()

    def loss(a):
        pairs = [fn(a) for fn in jax_fns]
        return sum(jnp.sum(v * jnp.asarray(w.numpy())) for (v, _), w in zip(pairs, weights)), pairs

    grad, pairs = jax.jit(jax.grad(loss, has_aux=True))(jnp.asarray(x))
    for (v, i), (values, indices) in zip(pairs, outs):
        np.testing.assert_array_equal(np.asarray(i), indices.numpy())
        np.testing.assert_array_equal(np.asarray(v), values.detach().numpy())
    np.testing.assert_array_equal(np.asarray(grad), t.grad.numpy())


def _check_sort_and_topk(dtype, shapes, seed: int) -> None:
    """Per shape and dim: sort (random direction) and topk with k = 1, n // 64 + 1 (partial_sort) and
    n // 2 (nth_element), random largest/sorted."""
    rng = np.random.default_rng(seed)
    for shape in shapes:
        x = _tied(rng, shape, dtype, True)
        for dim in range(-len(shape), 0):
            n = shape[dim]
            descending = bool(rng.integers(2))
            options = [(k, bool(rng.integers(2)), bool(rng.integers(2))) for k in (1, n // 64 + 1, n // 2)]
            _grad_pair([lambda t: torch.sort(t, dim, descending),
                        *(lambda t, o=o: torch.topk(t, o[0], dim, o[1], o[2]) for o in options)],
                       [lambda a: torch_sort(a, dim, descending),
                        *(lambda a, o=o: torch_topk(a, o[0], dim, o[1], o[2]) for o in options)], x)


def test_torch_sort_and_topk_values_indices_and_gradients(x64):
    """2-D and 3-D tied inputs over every dim, through ``jit(grad)``: indices, values and gradients
    bit-identical to torch's (the gradient goes to the returned, tied, element)."""
    _check_sort_and_topk(np.float64, [(2, 130, 3)], 4)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_sort_and_topk_gradients_grid(x64, dtype):
    """1-D to 3-D shapes, every dim, float32 and float64: indices, values and gradients bit-identical."""
    _check_sort_and_topk(dtype, [(150,), (3, 70), (70, 3), (2, 130, 3), (1, 1, 1), (5, 2)], 5)


def test_int64_and_vmap(x64):
    """int64 indices through jit, and ``vmap`` over a leading axis equal to torch's along dim 1."""
    x = _tied(np.random.default_rng(5), (4, 300), np.int64, False)
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: argsort(a, 1, True))(x)),
                                  torch.sort(t, 1, True).indices.numpy())
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda a: topk_indices(a, 200, 0, False, False))(x)),
                                  torch.topk(t, 200, 1, False, False).indices.numpy())
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda a: argsort(a))(x)), torch.sort(t).indices.numpy())


def test_zero_dim_and_empty(x64):
    """A 0-d input: index 0; ``k = 0``: empty; an empty dim sorts to nothing, as in torch."""
    values, indices = torch_topk(jnp.asarray(3.0), 1)
    assert float(values) == 3.0 and int(indices) == 0 and indices.shape == ()
    assert torch_topk(jnp.ones((3, 5)), 0, 1)[1].shape == (3, 0)
    assert torch_sort(jnp.ones((0, 5)), 0)[1].shape == (0, 5)
    assert int(torch_sort(jnp.asarray(2.0))[1]) == 0


def test_topk_errors():
    """torch's messages: bool input, k past the dim's size."""
    for args in ((jnp.ones(3, bool), 1), (jnp.ones(3), 4), (jnp.ones(3), -1)):
        torch_args = (torch.from_numpy(np.array(args[0])), args[1])
        with pytest.raises(RuntimeError) as expected:
            torch.topk(*torch_args)
        with pytest.raises(RuntimeError, match=str(expected.value)):
            torch_topk(*args)


@pytest.mark.slow
def test_orders_full_grid():
    """Large seeded grid: 1-D n up to 2000 in float32/float64/int64, every topk k branch, both directions."""
    for i, (rng, x) in enumerate(_cases(10, 600, 2000)):
        _check_sort(x, descending=bool(i % 2))
        for k in _ks(rng, x.shape[0]):
            for largest in (True, False):
                _check_topk(x, k, largest, sorted_=bool(rng.integers(2)))


@pytest.mark.slow
def test_orders_other_dtypes_and_heapsort_depth():
    """float16, bfloat16, int32, int16, uint8 and bool inputs, and long all-but-equal inputs that drive
    introsort/introselect deep (NaN-heavy, two values), up to n = 40000 descending (no radix sort)."""
    rng = np.random.default_rng(11)
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.uint8, torch.bool):
        for n in (17, 300, 2000):
            t = torch.randint(0, 3, (2, n), generator=torch.Generator().manual_seed(n)).to(dtype)
            x = t.float().numpy().astype(np.float32) if t.is_floating_point() else t.numpy()
            for descending in (False, True):
                np.testing.assert_array_equal(cpu_sort_order(x, descending), torch.sort(t, descending=descending)
                                              .indices.numpy())
            for k in (1, n // 64 + 1, n // 3, n) if dtype != torch.bool else ():
                np.testing.assert_array_equal(cpu_topk_order(x, k, bool(k % 2), bool(k % 3)),
                                              torch.topk(t, k, -1, bool(k % 2), bool(k % 3)).indices.numpy())
    for n in (5000, 40000):
        x = np.where(rng.random(n) < 0.5, np.nan, rng.integers(0, 2, n)).astype(np.float64)
        _check_sort(x, True)
        _check_topk(x, n // 2, False, True)
        _check_sort(rng.integers(0, 2, n), True)


class _Adversary:
    """McIlroy's "killer adversary" for quicksort: values decided lazily while the algorithm compares,
    each comparison of two undecided ("gas") items freezing one, so pivots come out near the extremes.
    Run against :func:`std_sort` / :func:`nth_element` it yields an input that drives introsort and
    introselect to their depth limit (heapsort / heap select); replaying torch on it checks those branches."""

    def __init__(self, n: int) -> None:
        self.gas, self.solid, self.candidate = n, 0, 0
        self.value = [n] * n

    def key(self, item: int) -> "_Key":
        return _Key(self, item)

    def less(self, x: int, y: int) -> bool:
        value = self.value
        if value[x] == self.gas and value[y] == self.gas:
            value[x if x == self.candidate else y] = self.solid
            self.solid += 1
        if value[x] == self.gas:
            self.candidate = x
        elif value[y] == self.gas:
            self.candidate = y
        return value[x] < value[y]


class _Key:
    def __init__(self, adversary: _Adversary, item: int) -> None:
        self.adversary, self.item = adversary, item

    def __lt__(self, other: "_Key") -> bool:
        return self.adversary.less(self.item, other.item)


@pytest.mark.slow
def test_depth_limit_branches_match_torch():
    """Adversarial inputs (and squashed ones, with ties everywhere) where introsort falls back to heapsort and
    introselect to heap select (the raw nth_element ones and the halved ones reach both limits at every n
    here): indices equal to torch's."""
    for n in (100, 1000, 3000):
        for select in (False, True):
            adversary = _Adversary(n)
            pairs = [(adversary.key(i), i) for i in range(n)]
            if select:
                nth_element(pairs, 0, n // 2, n)
            else:
                std_sort(pairs, 0, n)
            values = np.asarray(adversary.value, np.float64)
            for x in (values, values // 2, values // 7, np.where(values % 5 == 0, np.nan, values // 3)):
                _check_sort(x, False)
                _check_topk(x, n // 2 + 1, False, True)
                _check_topk(x, n // 2 + 1, False, False)


def test_eager_topk_and_argsort_keep_float64_and_int64_under_an_x64_context():
    """Under ``with jax.enable_x64(True)`` (a context of this thread only) an eager sort keeps its float64
    values and int64 indices: values 1e-10 apart (equal in float32) keep their order, every time."""
    import jax
    import jax.numpy as jnp

    from jax_impl import sorting

    with jax.enable_x64(True):
        for i in range(30):
            busy = jnp.ones((600, 600)) @ jnp.ones((600, 600))  # still computing: the sort would wait on a thread
            x = jnp.asarray(np.r_[np.ones(200), 1.0 + 1e-10 * (1 + np.arange(i % 3 + 1))]) + 0 * busy[0, 0]
            top = sorting.topk_indices(x, i % 3 + 1)
            tiled = jnp.tile(x, 40)
            order = sorting.argsort(tiled)
            assert top.dtype == jnp.int64 and order.dtype == jnp.int64
            assert sorted(np.asarray(top).tolist()) == list(range(200, 201 + i % 3))
            assert (np.diff(np.asarray(tiled)[np.asarray(order)]) >= 0).all()
