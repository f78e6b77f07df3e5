"""Tensor operations of ordinary model code, ported and checked against torch: reductions with indices,
indexing, sorting, norms, products, casts, constructors and in-place forms, as methods and as ``torch.<fn>``.

Each model multiplies its input by a ones-initialised weight and adds a zero bias, both of the input's full
shape, so the gradients show where torch sends them element by element: to one of several tied maxima
(``max(dim)``, ``sort``, ``topk``) or split among them (``amax``, ``max()``), and what a norm's gradient is at
a zero vector. Inputs hold ties and zeros on purpose (half-integers from a seeded generator).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from jax.extend.core import jaxpr_as_fun

import parity
from parity.port import PortError
from tests._tiers import slow_after

SHAPE = (3, 4, 5)


def _ties(seed: int = 0, shape=SHAPE) -> torch.Tensor:
    """Half-integers in [-2, 2] (ties and zeros everywhere) plus a zero row, float64."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, shape, generator=generator).double() / 2
    x[0, 1] = 0.0  # a zero vector along the last dim: norms' gradients at zero
    return x


def _smooth(seed: int = 0, shape=SHAPE) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class _Weighted(torch.nn.Module):
    """``forward(x)`` is ``ops(x * weight + bias)``: a parameter per input element."""

    def __init__(self, shape=SHAPE) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(shape))
        self.bias = torch.nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        return self.ops(x * self.weight + self.bias)


def _check(model: torch.nn.Module, x: torch.Tensor, dtypes=("double", "float")) -> None:
    """``check_port`` in float64 (1e-12; measured worst 7e-15, gradients) and float32 (check_port's 1e-5;
    measured worst 7.6e-6 absolute, 6e-7 relative: Elementwise's gradients through exp/log/pow, the float32
    rounding of each side's own order), every phase within tolerance, no floor needed."""
    for dtype in dtypes:
        m = getattr(model, dtype)()
        check = parity.port.check_port(m, example_input=x.to(m.weight.dtype))
        assert check.passed, f"{dtype}\n{check.table()}\n{parity.port.port_source(m)}"


class CommonOps(_Weighted):
    """The default tier's sample, on tied inputs with a zero row: max(dim) / amax ties, a norm at zero, |x|
    at zero, clamp at its bound, stable sort, topk (on distinct values), gather / scatter_add, baddbmm, var,
    logsumexp, repeat / roll, a cast and in-place forms (the slow tier's models below cover the rest)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("rows", torch.randint(0, 4, (3, 2, 5), generator=torch.Generator().manual_seed(0)))
        self.register_buffer("spread", torch.arange(60.0).reshape(SHAPE) / 4096)

    def ops(self, h):
        values, indices = h.max(1)
        top = (h + self.spread).topk(2, dim=1)
        ordered = h.sort(dim=-1, descending=True, stable=True)
        return (
            values, indices, h.amax(-1), torch.linalg.vector_norm(h, dim=-1), h.norm(p=1, dim=1), h.abs(),
            h.clamp_min(0.5), ordered.values, ordered.indices, top.values, top.indices, h.argmax(-1),
            h.gather(1, self.rows), torch.zeros_like(h).scatter_add(1, self.rows, h[:, :2]),
            torch.baddbmm(h[:, :, :4], h, h.mT[:, :, :4], alpha=0.5), h.var(1), h.logsumexp(-1),
            h.repeat(1, 2, 1).roll(1, 2), h.long(), (h * 1).add_(1).clamp_(max=1.0),
        )


def test_common_ops_port(x64):
    _check(CommonOps(), _ties(0))


class Reductions(_Weighted):
    """var/std overloads, prod, logsumexp, amax/amin, max/min in every form, argmax/argmin, all/any, cumsum,
    cumprod: tied inputs, so ``amax`` and ``max()`` split the gradient and ``max(dim)`` gives it to one."""

    def ops(self, h):
        values, indices = h.max(1)
        low = torch.min(h, dim=-1, keepdim=True)
        return (
            h.var(1), h.std(dim=(0, 2), keepdim=True), torch.var(h, 2, False), h.std(correction=0), h.var(False),
            torch.var(h, -1, True, True), h.var(1, correction=2),
            h.prod(1), torch.prod(h, -1, keepdim=True), h.logsumexp(1), torch.logsumexp(h, (0, 2), keepdim=True),
            h.amax((0, 1)), h.amin(-1, keepdim=True), h.max(), torch.min(h),
            values, indices, low.values, low.indices, torch.max(h, 0)[0], torch.maximum(h, h.flip(0)),
            h.min(h.roll(1, 2)), h.argmax(), h.argmin(1, keepdim=True), torch.argmax(h, dim=-1),
            (h > 0).all(), (h > 0).any(1), torch.all(h > -2, dim=2, keepdim=True),
            h.cumsum(1), torch.cumprod(h, dim=-1), (h > 0).cumsum(2), h.sum((0, 2)), torch.mean(h, -1, True),
        )


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_reductions_port(x64):
    _check(Reductions(), _ties(1))


class Norms(_Weighted):
    """``torch.norm`` / ``Tensor.norm`` / ``linalg.vector_norm`` / ``linalg.norm`` / ``linalg.matrix_norm``
    over a grid of ``p`` and ``dim``; a zero vector in the input (torch's gradient there is 0)."""

    VECTOR = [2, 1, float("inf"), float("-inf"), 0, 0.5, 3, 1.5, -1]
    DIMS = [None, -1, (0, 2), 1]

    def ops(self, h):
        out = [h.norm(), h.norm(dim=1), torch.norm(h, p=1, dim=-1, keepdim=True), torch.norm(h, "fro", (1, 2)),
               h.norm(p=None, dim=-1), torch.linalg.norm(h, dim=-1), torch.linalg.norm(h),
               torch.linalg.norm(h[0], float("inf")), torch.linalg.norm(h, 1, (1, 2)),
               torch.linalg.norm(h, "fro", dim=(0, 1), keepdim=True), torch.linalg.norm(h[1, 0], 3),
               torch.linalg.matrix_norm(h, -1), torch.linalg.matrix_norm(h, float("-inf"), dim=(0, 2)),
               torch.linalg.matrix_norm(h), torch.linalg.vector_norm(h, dtype=torch.float64)]
        for i, p in enumerate(self.VECTOR):
            dim = self.DIMS[i % len(self.DIMS)]
            out.append(torch.linalg.vector_norm(h, p, dim, keepdim=i % 2 == 0))
            out.append(h.norm(p, -1))
        return tuple(out)


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_norms_port(x64):
    _check(Norms(), _ties(2))


class Products(_Weighted):
    """einsum (operands as arguments and as a list), matmul family, addmm/baddbmm with alpha/beta, outer,
    diag, diagonal, tril/triu, .T/.mT/.mH/.H."""

    def ops(self, h):
        m = h[0]
        return (
            torch.einsum("bij,bkj->bik", h, h), torch.einsum("bij,jk->bik", [h, m.T]), torch.einsum("ii", m[:, :4]),
            torch.bmm(h, h.mT), h.bmm(h.mH), torch.baddbmm(h[:, :, :4], h, h.mT[:, :, :4], beta=0.5, alpha=2),
            torch.baddbmm(h.sum(-1, keepdim=True), h, h.mT, beta=0), torch.addmm(m[0, :4], m, m.T),
            m.addmm(m[:, :4], h[1, :4], alpha=-1.5), m.mm(h[2].T), h.matmul(h[0].mT), torch.matmul(h[0, 0], m.T),
            torch.outer(m[0], m[1]), m[0].outer(m[2]), torch.diag(m[0]), m.diag(1), torch.diag(m[0], -2),
            m.diagonal(), torch.diagonal(h, 1, 1, 2), m.tril(1), m.triu(-1), torch.tril(h, diagonal=-1),
            m.T, h.mT, m.H, h.mH,
        )


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_products_port(x64):
    _check(Products(), _smooth(3))


class Indexing(_Weighted):
    """gather (an index narrower than the input), scatter (src and value, onto distinct positions),
    scatter_add (repeated positions), each src of the index's shape (torch's backward needs it), index_select, repeat, repeat_interleave, tile, roll, unbind, flip,
    squeeze/unsqueeze, stack/cat; scatter's ``reduce=`` (no torch derivative) on the bare input."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.register_buffer("rows", torch.randint(0, 4, (3, 2, 5), generator=generator))
        self.register_buffer("perm", torch.stack([torch.randperm(4, generator=generator)[:3] for _ in range(3)]))
        self.register_buffer("picks", torch.tensor([3, 0, 3]))

    def forward(self, x):
        h = x * self.weight + self.bias
        perm = self.perm.unsqueeze(-1).expand(3, 3, 5)
        a, b, c = h.unbind(0)
        return (
            h.gather(1, self.rows), torch.gather(h, 2, self.rows[:, :, :3]),
            torch.zeros_like(h).scatter(1, perm, h[:, :3]), h.scatter(1, perm, -1.0), torch.scatter(h, 1, perm, h[:, 1:] * 2),
            torch.zeros_like(h).scatter_add(1, self.rows, h[:, 2:]), torch.scatter_add(h, 2, self.rows[:, :, :2], h[:, :2, 3:]),
            x.scatter(1, self.rows, x * 3, reduce="add"), x.scatter(1, perm, 2.0, reduce="multiply"),
            h.index_select(1, self.picks), torch.index_select(h, -1, self.picks[0]),
            h.repeat(2, 1, 1), h.repeat((1, 2, 1, 1)), h.repeat_interleave(2, dim=1), torch.repeat_interleave(h, 3),
            h.tile((2,)), torch.tile(h, (2, 1, 1, 1)), h.roll(1, 1), torch.roll(h, (1, -2), (0, 2)), h.roll(3),
            a + b * c, torch.unbind(h, -1)[2], h.flip(1), torch.flip(h, (0, 2)), h.flip(0, -1),
            torch.fliplr(h[0]), torch.flipud(h[1]), h.unsqueeze(1).squeeze((1,)), h[:, :1].squeeze(1),
            torch.squeeze(h[:1, :, :1]), h.unsqueeze(-1).unsqueeze(0).squeeze(), torch.stack((a, b), -1),
            torch.cat([a, b], -1), torch.concat((h, h), dim=1), h.expand_as(torch.zeros(2, 3, 4, 5)),
            h.view_as(h.reshape(-1)), h.reshape_as(h.reshape(12, 5)),
        )


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_indexing_ports(x64):
    _check(Indexing(), _smooth(4))


class Sorting(_Weighted):
    """topk (k, dim, largest, sorted=False through an order-free sum) on distinct values (among ties torch's
    CPU partial sort picks its own), sort and argsort (stable, descending) on tied inputs; ``.values`` /
    ``.indices`` and unpacking."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("spread", torch.arange(60.0).reshape(SHAPE).remainder(7) / 64 + torch.arange(60.0).reshape(SHAPE) / 4096)

    def ops(self, h):
        d = h + self.spread
        top = d.topk(2)
        values, indices = torch.topk(d, 3, dim=1, largest=False)
        ordered = torch.sort(h, dim=1, descending=True, stable=True)
        return (
            top.values, top.indices, values, indices, torch.topk(d, 2, 0, True, True)[0],
            d.topk(3, sorted=False).values.sum(-1), ordered.values, ordered.indices,
            h.sort(stable=True)[0], h.sort(dim=0, descending=True, stable=True).indices, h.argsort(stable=True),
            torch.argsort(h, dim=1, descending=True, stable=True), h.reshape(-1).sort(stable=True).values,
        )


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_sorting_ports(x64):
    _check(Sorting(), _ties(5))


class Elementwise(_Weighted):
    """clamp forms (ties at the bounds), unary math, softmax methods, casts, constructors, in-place forms."""

    def ops(self, h):
        k = (h * 1.0).add_(1).mul_(2).clamp_(-3.0, 3.0)  # each in-place op's input is read by it alone
        z = torch.empty_like(h).copy_(h[0]).masked_fill_(h > 1, 0.5)
        filled = h.new_empty(2, 3).fill_(2.5)
        return (
            h.clamp_min(0.5), torch.clamp_max(h, 0.5), h.clamp(-1.0, 1.0), torch.clamp(h, min=0.0),
            h.clip(max=-0.5), h.clamp(1.0, -1.0), h.abs().sqrt(), (h.abs() + 1).rsqrt(), torch.rsqrt(h.abs() + 2),
            h.exp().log(), torch.pow(h, 2), h.pow(3), h.sigmoid(), torch.tanh(h), h.softmax(1),
            h.log_softmax(dim=-1), h.reciprocal(), torch.square(h), h.sin() + h.cos(), (h.abs() * 0.1).log1p(),
            h.expm1(), h.sign() * h.floor() + h.ceil(), k, z, filled, h.new_zeros(3) + h.new_ones((3,)),
            h.new_full((2, 2), 3.0), h.new_tensor([1.0, 2.0]), torch.zeros_like(h) + torch.ones_like(h),
            torch.full_like(h, 7.0), h.float().double().type_as(h), h.half().type(h.dtype), h.long(), h.int(),
            h.bool(), h.type(torch.int64), h.to(torch.float32).type_as(h), h.contiguous() * h.numel() / h.dim(),
            h.float().type("torch.DoubleTensor"), h.long().float().type_as(h),
        )


@pytest.mark.slow  # compiling some 40 ops forward and backward, in two dtypes: seconds
def test_elementwise_casts_and_constructors_port(x64):
    _check(Elementwise(), _ties(6))


def test_the_generated_source_reads_as_torch_wrote_it():
    source = parity.port.port_source(CommonOps())
    for line in ("max_1 = torch_max_dim(add, 1)", "getitem_1 = max_1[1]", "topk = torch_topk(add_1, 2, dim=1)",
                 "getattr_5 = topk[1]", "linalg_vector_norm = torch_vector_norm(add, dim=-1)",
                 "clamp_min = torch_clamp(add, 0.5)", "baddbmm = getitem_3 + 0.5 * jnp.matmul(add, getitem_4)",
                 "repeat = jnp.tile(add, (1, 2, 1))", "clamp_ = torch_clamp(add_, max=1.0)",
                 "def torch_vector_norm(", "def torch_scatter("):
        assert line in source, line
    assert "def torch_linalg_norm(" not in source  # only the helpers the twin calls


class _Op(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn, what", [
    (lambda x: torch.norm(x, p="nuc"), "ord='nuc'"),
    (lambda x: torch.linalg.norm(x, 2, (0, 1)), "ord=2"),
    (lambda x: torch.repeat_interleave(x.long()), "repeat_interleave(repeats)"),
    (lambda x: x.scatter_reduce(0, x.long(), x, "amax"), "'scatter_reduce'"),
    (lambda x: x.type(), "x.type()"),
    (lambda x: x.gather(0, x.long(), sparse_grad=True), "sparse_grad=True"),
])
def test_unmapped_forms_raise_port_errors_naming_them(fn, what):
    with pytest.raises(PortError, match=what.replace("(", r"\(").replace(")", r"\)")):
        parity.port.port_source(_Op(fn))


class Repeats(_Weighted):
    """``repeat_interleave`` with tensor repeats (a buffer) and ``output_size``, as the twin needs under jit."""

    def __init__(self) -> None:
        super().__init__((3, 4))
        self.register_buffer("repeats", torch.tensor([1, 0, 2, 3]))

    def ops(self, h):
        return (h.repeat_interleave(self.repeats, dim=1, output_size=6),
                torch.repeat_interleave(h, self.repeats[1:], dim=0, output_size=5))


@pytest.mark.slow  # a compile in two dtypes
def test_repeat_interleave_with_tensor_repeats_ports(x64):
    _check(Repeats(), _smooth(7, (3, 4)))


def test_repeat_interleave_with_traced_tensor_repeats_needs_output_size():
    from jax_impl.tensor_ops import torch_repeat_interleave

    with pytest.raises(NotImplementedError, match="output_size"):
        jax.jit(lambda a, r: torch_repeat_interleave(a, r, 0))(np.ones(3), np.array([1, 2, 0]))


@pytest.mark.slow  # eager calls, one compile each
def test_repeat_interleave_with_concrete_tensor_repeats_matches_torch(x64):
    from jax_impl.tensor_ops import torch_repeat_interleave

    x = _smooth(8, (3, 4))
    for repeats, dim in (([1, 0, 2, 3], 1), ([2], 0), ([1, 2, 0], 0), ([3], None)):
        expected = torch.repeat_interleave(x, torch.tensor(repeats), dim=dim).numpy()
        got = torch_repeat_interleave(jax.numpy.asarray(x.numpy()), jax.numpy.asarray(repeats), dim)
        np.testing.assert_array_equal(np.asarray(got), expected)


# ---- The helpers against torch over seeded grids: forward values and gradients (float64) ----


def _close(pair) -> None:
    out, got, grad, jgrad = pair
    # float64: the same formulas in the same order up to the reduction's summation order; measured <= 3e-15
    # relative (the ord=0.5 norm over all 60 elements, a value of some 2e3, is 2.3e-12 apart absolutely),
    # the same eagerly and in _OneCompilation's jitted program
    np.testing.assert_allclose(got, out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jgrad, grad, rtol=1e-12, atol=1e-12)


class _OneCompilation:
    """A grid's twin calls, traced where the test makes them and run together in one compilation.

    Eagerly each call compiles its own small programs (a host callback, a ``take_along_axis`` or a custom
    gradient for every call), some tens of milliseconds each: most of a grid's time (this file's grids:
    about 15 s of CPU eagerly, 10 s in one program per test, measured on 2 cores). Each call is traced
    at once (its loop variables bound then) and :meth:`check` runs them all in one jitted program and
    compares every result with torch's.
    """

    def __init__(self) -> None:
        self._calls: list = []

    def _add(self, fn, args, check) -> None:
        self._calls.append((jax.make_jaxpr(fn)(*args), args, check))

    def grad_pair(self, torch_fn, jax_fn, x: torch.Tensor, seed: int = 0) -> None:
        """``(torch output, twin output, torch grad, twin grad)`` of ``sum(w * fn(x))``, ``w`` seeded normals,
        compared by :func:`_close`; the twin's side runs in :meth:`check`."""
        t = x.clone().requires_grad_()
        out = torch_fn(t)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
        (w * out).sum().backward()
        grad = (t.grad if t.grad is not None else torch.zeros_like(t)).numpy()  # torch leaves ord=0's undefined

        def twin(a, cotangent):
            got, vjp = jax.vjp(jax_fn, a)
            return got, vjp(cotangent)[0]

        self._add(twin, (x.numpy(), w.numpy()),
                  lambda got, jgrad, out=out.detach().numpy(): _close((out, got, grad, jgrad)))

    def equal(self, jax_fn, x: np.ndarray, expected: np.ndarray) -> None:
        """``jax_fn(x)`` must equal ``expected`` exactly (checked in :meth:`check`)."""
        self._add(jax_fn, (x,), lambda got: np.testing.assert_array_equal(got, expected))

    def check(self) -> None:
        results = jax.jit(lambda args: [jaxpr_as_fun(jaxpr)(*a)
                                        for (jaxpr, _, _), a in zip(self._calls, args)])(
            [args for _, args, _ in self._calls])
        for (_, _, check), result in zip(self._calls, results):
            check(*(np.asarray(r) for r in result))


@pytest.mark.slow  # 72 custom-gradient calls
@pytest.mark.parametrize("ord", [2, 1, float("inf"), float("-inf"), 0, 0.5, 3, 1.5, -1])
def test_vector_norm_values_and_gradients_match_torch_at_zero_and_ties(x64, ord):
    from jax_impl.tensor_ops import torch_vector_norm

    x = _ties(2)
    grid = _OneCompilation()
    for dim in (None, -1, (0, 2), 1):
        for keepdim in (False, True):
            grid.grad_pair(lambda t: torch.linalg.vector_norm(t, ord, dim, keepdim),
                           lambda a: torch_vector_norm(a, ord, dim, keepdim), x)
    grid.check()


@pytest.mark.slow
@pytest.mark.parametrize("ord", [1, -1, float("inf"), float("-inf"), "fro", None])
def test_linalg_norm_values_and_gradients_match_torch(x64, ord):
    from jax_impl.tensor_ops import torch_linalg_norm

    x = _ties(3)
    grid = _OneCompilation()
    for dim in ((0, 1), (-1, -2), (2, 0), None) if ord is not None else (None, -1, (1, 2)):
        for keepdim in (False, True):
            source = x[0] if dim is None else x
            grid.grad_pair(lambda t: torch.linalg.norm(t, ord, dim, keepdim),
                           lambda a: torch_linalg_norm(a, ord, dim, keepdim), source)
    grid.check()


@pytest.mark.slow
def test_var_logsumexp_and_max_dim_match_torch_over_dims(x64):
    from jax_impl.tensor_ops import torch_logsumexp, torch_max_dim, torch_var

    x = _ties(4)
    grid = _OneCompilation()
    for dim in (None, 0, -1, (0, 2), [1, 2]):
        for keepdim in (False, True):
            for correction in (0, 1, 2):
                grid.grad_pair(lambda t: torch.var(t, dim, correction=correction, keepdim=keepdim),
                               lambda a: torch_var(a, dim, correction, keepdim), x)
            if dim is not None:
                grid.grad_pair(lambda t: torch.logsumexp(t, dim, keepdim),
                               lambda a: torch_logsumexp(a, dim, keepdim), x)
            if isinstance(dim, int):
                for largest, fn in ((True, torch.max), (False, torch.min)):
                    grid.grad_pair(lambda t: fn(t, dim, keepdim).values,
                                   lambda a: torch_max_dim(a, dim, keepdim, largest)[0], x)
                    grid.equal(lambda a: torch_max_dim(a, dim, keepdim, largest)[1], x.numpy(),
                               fn(x, dim, keepdim).indices.numpy())
    grid.check()


@pytest.mark.slow
def test_topk_sort_gather_scatter_match_torch_over_dims(x64):
    from jax_impl.tensor_ops import torch_gather, torch_scatter, torch_sort, torch_topk

    distinct = _smooth(5)
    tied = _ties(5)
    generator = torch.Generator().manual_seed(5)
    grid = _OneCompilation()
    for dim in (0, 1, -1):
        for largest in (True, False):
            for k in (1, 2, 3):
                grid.grad_pair(lambda t: torch.topk(t, k, dim, largest).values,
                               lambda a: torch_topk(a, k, dim, largest)[0], distinct)
                grid.equal(lambda a: torch_topk(a, k, dim, largest)[1], distinct.numpy(),
                           torch.topk(distinct, k, dim, largest).indices.numpy())
        for descending in (False, True):
            grid.grad_pair(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True).values,
                           lambda a: torch_sort(a, dim, descending)[0], tied)
            grid.equal(lambda a: torch_sort(a, dim, descending)[1], tied.numpy(),
                       torch.sort(tied, dim=dim, descending=descending, stable=True).indices.numpy())
        shape = [2, 3, 4]
        shape[dim] = 6
        index = torch.randint(0, SHAPE[dim], tuple(shape), generator=generator)
        grid.grad_pair(lambda t: torch.gather(t, dim, index), lambda a: torch_gather(a, dim, index.numpy()),
                       distinct)
        src = _smooth(6, tuple(shape))
        grid.grad_pair(lambda t: torch.scatter_add(t, dim, index, src),
                       lambda a: torch_scatter(a, dim, index.numpy(), src.numpy(), "add"), distinct)
        grid.grad_pair(lambda t: torch.scatter_add(distinct, dim, index, t),
                       lambda a: torch_scatter(distinct.numpy(), dim, index.numpy(), a, "add"), src)  # numpy input
        for reduce in ("add", "multiply"):
            grid.equal(lambda a: torch_scatter(a, dim, index.numpy(), src.numpy(), reduce), distinct.numpy(),
                       torch.scatter(distinct, dim, index, src, reduce=reduce).numpy())
    grid.check()


@pytest.mark.slow  # eager calls, one compile each
def test_nan_orders_and_degenerate_corrections_are_torchs(x64):
    """NaN is the largest value for sort, topk and max(dim), as in torch; a correction of N or more divides
    by zero (inf, or NaN for 0/0), as torch's var."""
    from jax_impl.tensor_ops import torch_max_dim, torch_sort, torch_topk, torch_var

    x = torch.tensor([[1.0, float("nan"), 3.0, -1.0], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    a = jax.numpy.asarray(x.numpy())
    for descending in (False, True):
        expected = torch.sort(x, descending=descending, stable=True)
        for got, want in zip(torch_sort(a, -1, descending), expected):
            np.testing.assert_array_equal(np.asarray(got), want.numpy())
    for largest in (True, False):
        expected = torch.topk(x[:1], 2, largest=largest)
        for got, want in zip(torch_topk(a[:1], 2, largest=largest), expected):
            np.testing.assert_array_equal(np.asarray(got), want.numpy())
    for largest, fn in ((True, torch.max), (False, torch.min)):
        for got, want in zip(torch_max_dim(a, 1, largest=largest), fn(x, 1)):
            np.testing.assert_array_equal(np.asarray(got), want.numpy())
    for correction in (4, 5):
        np.testing.assert_array_equal(np.asarray(torch_var(a[1:], 1, correction)),
                                      torch.var(x[1:], 1, correction=correction).numpy())
        np.testing.assert_array_equal(np.asarray(torch_var(a[:1, [0, 2]], 1, correction)),
                                      torch.var(x[:1, [0, 2]], 1, correction=correction).numpy())


class Windows(_Weighted):
    """``Tensor.unfold`` over a seeded grid of (dimension, size, step): patches (``step == size``, a reshape),
    overlapping windows (their gradients summed per element), gaps between windows, negative dimensions."""

    def __init__(self, cases) -> None:
        super().__init__()
        self.cases = cases

    def ops(self, h):
        return tuple(h.unfold(dim, size, step) for dim, size, step in self.cases)


def _window_cases(seed: int, count: int = 6):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        dim = int(rng.integers(-3, 3))
        length = SHAPE[dim]
        size = int(rng.integers(1, length + 1))
        cases.append((dim, size, int(rng.integers(1, length + 1))))
    return cases + [(2, 5, 5), (1, 2, 2), (-1, 2, 1)]


@pytest.mark.parametrize("seed", slow_after([0, 1]))  # the second grid: slow tier
def test_unfold_ports(x64, seed):
    _check(Windows(_window_cases(seed)), _smooth(seed))
