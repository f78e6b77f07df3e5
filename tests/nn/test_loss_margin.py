"""jax_impl's margin and embedding losses against torch.nn.functional and torch.nn (torch 2.13 CPU).

Values and gradients (``jax.vjp`` of the jitted loss with a random
cotangent vs torch autograd of ``sum(loss * cotangent)``) w.r.t. every
input torch differentiates: both inputs of the embedding/ranking losses, the
ranking target, and ``target``/``weight`` of ``multilabel_soft_margin_loss``.
Error measure: ``max|jax - torch| / max|torch|`` (inf and NaN at the same
places with the same value), as in ``test_loss.py``.

Inputs are either standard normal (rounding-sensitive) or multiples of 1/4
(``grid``), where ``z == 0`` ties at the margin are frequent and exact in
both libraries; torch's gradient there is ``clamp_min``'s (passes) for the
composites and 0 for the multi-margin kernels (``z > 0``).

Measured over the full option products (the slow grids below run a covering subset of them;
torch 2.13 CPU, jax 0.10 XLA:CPU):

- ``multi_margin_loss``, ``multilabel_margin_loss``: float32 per-sample
  values (``'none'``) and all gradients bit-identical (torch's serial loops
  and hand-written backward kernels reproduced). Their float32
  ``'mean'``/``'sum'`` scalars come from torch's double accumulator and
  divisions; here a compensated sum rounded to float, then divided: worst
  seen 1 ULP (9.9e-8 relative), bound ``ULP32``.
- ``margin_ranking_loss``, ``hinge_embedding_loss``: float32 ``'none'``
  values and all gradients bit-identical; ``'mean'``/``'sum'`` differ by
  torch's summation order, worst seen 2.0e-7, bound ``SUM32 = 5e-7``.
- ``soft_margin_loss``, ``cosine_embedding_loss``,
  ``multilabel_soft_margin_loss`` (SLEEF's vs XLA's ``exp``/``log1p``,
  torch's vectorised feature-axis sums): worst seen 3.5e-7 (cosine
  gradients, ``'mean'``), 1.4e-7 (soft margin), 1.3e-7 (multilabel soft
  margin) in float32, bound ``F32 = 1e-6``, the repo's float32 loss bound.
- float64: worst seen 8.2e-16 (cosine gradients), bound ``F64 = 1e-14``.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as TF
from flax import nnx

import jax_impl.nn as jnn
import jax_impl.nn.functional as F

EXACT = 0.0
ULP32 = 2.0**-23
SUM32 = 5e-7
F32 = 1e-6
F64 = 1e-14
REDUCTIONS = ("none", "mean", "sum")


# ----------------------------------------------------------------------------- comparison


def _error(got, want, what: str) -> float:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    if not finite.any():
        return 0.0
    scale = max(np.abs(want[finite]).max(), np.finfo(np.float64).tiny)
    return float(np.abs(got[finite] - want[finite]).max() / scale)


def _assert_close(got, want, bound: float, what: str) -> None:
    if bound == EXACT:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=what)
    else:
        err = _error(got, want, what)
        assert err <= bound, f"{what}: {err:.3g} > {bound:.3g}"


@functools.cache
def _jitted(jax_fn, static: tuple, diff: tuple):
    fn = functools.partial(jax_fn, **dict(static))

    def value_and_vjp(ct, *xs):
        def of_diff(*d):
            full = list(xs)
            for i, v in zip(diff, d):
                full[i] = v
            return fn(*full)

        out, vjp = jax.vjp(of_diff, *(xs[i] for i in diff))
        return out, vjp(ct.astype(out.dtype))

    return jax.jit(value_and_vjp)


def _compare(jax_fn, torch_fn, arrays, diff, dtype, value_bound, grad_bound, **static) -> None:
    """Jitted value and vjp of ``jax_fn(*arrays, **static)`` vs torch; integer arrays stay integer."""
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    t_in = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    t_out = torch_fn(*t_in, **static)
    ct = np.random.default_rng(7).standard_normal(tuple(t_out.shape)).astype(dtype)
    (t_out * torch.tensor(ct)).sum().backward()
    with jax.enable_x64(dtype == np.float64):
        j_out, grads = _jitted(jax_fn, tuple(sorted(static.items())), tuple(diff))(
            jnp.asarray(ct), *(jnp.asarray(a) for a in arrays)
        )
        assert j_out.dtype == dtype
    _assert_close(j_out, t_out.detach().numpy(), value_bound, "value")
    for g, i in zip(grads, diff):
        _assert_close(g, t_in[i].grad.numpy(), grad_bound, f"grad[{i}]")


def _values(rng, shape, data: str) -> np.ndarray:
    if data == "grid":
        return rng.integers(-8, 9, shape) / 4.0
    return rng.standard_normal(shape)


def _bounds(dtype, reduction: str, kernel_exact: bool, scalar_bound: float, inexact: float = F32):
    """(value, gradient) bounds: see the module docstring."""
    if dtype == np.float64:
        return F64, F64
    if not kernel_exact:
        return inexact, inexact
    return (EXACT if reduction == "none" else scalar_bound), EXACT


# ----------------------------------------------------------------------------- multi_margin_loss

# (input shape, target shape): batched, unbatched with 0-d / (1,) target, 0-d input, one class.
MM_SHAPES = [((7, 5), (7,)), ((5,), ()), ((5,), (1,)), ((), ()), ((3, 1), (3,)), ((40, 13), (40,))]


def _multi_margin_case(shape, data, p, margin, weighted, reduction, dtype, seed):
    (in_shape, t_shape) = shape
    rng = np.random.default_rng(seed)
    classes = 1 if in_shape == () else in_shape[-1]
    x = _values(rng, in_shape, data)
    y = rng.integers(0, classes, t_shape)
    vb, gb = _bounds(dtype, reduction, True, ULP32)
    if weighted:
        w = rng.uniform(0.5, 2.0, classes)
        _compare(
            lambda a, b, c, **k: F.multi_margin_loss(a, b, weight=c, **k),
            lambda a, b, c, **k: TF.multi_margin_loss(a, b, weight=c, **k),
            [x, y, w], [0], dtype, vb, gb, p=p, margin=margin, reduction=reduction,
        )
    else:
        _compare(F.multi_margin_loss, TF.multi_margin_loss, [x, y], [0], dtype, vb, gb,
                 p=p, margin=margin, reduction=reduction)


@pytest.mark.parametrize(
    "shape,data,p,margin,weighted,reduction,dtype",
    [
        (MM_SHAPES[0], "grid", 2, 0.25, True, "mean", np.float32),
        (MM_SHAPES[1], "normal", 1, 1.0, False, "none", np.float64),
    ],
)
def test_multi_margin_loss(shape, data, p, margin, weighted, reduction, dtype):
    _multi_margin_case(shape, data, p, margin, weighted, reduction, dtype, seed=0)


# (p, weighted, reduction, dtype) rows that hold every pair of two options' values (a pairwise
# covering array of the 2 x 2 x 3 x 2 product): each reduction with each dtype, each p with each
# weighting, and so on.
MM_PAIRWISE = [
    (1, False, "none", np.float32), (2, True, "none", np.float64),
    (2, False, "mean", np.float32), (1, True, "mean", np.float64),
    (1, True, "sum", np.float32), (2, False, "sum", np.float64),
]


@pytest.mark.slow
@pytest.mark.parametrize("shape", MM_SHAPES)
@pytest.mark.parametrize("data", ["normal", "grid"])
def test_multi_margin_loss_grid(shape, data):
    """Every option combination on the batched shape, every pair of option values on the others.

    Each combination compiles its own kernel. The options act per sample and per class, the same
    at any shape, so the full 24-combination product runs on ``(7, 5)``; the unbatched, 0-d,
    one-class and 40-sample shapes check their shape handling with each reduction, dtype, p and
    weighting in the 6 pairwise rows (every pair of values of two options meets once).
    """
    if shape == MM_SHAPES[0]:
        combos = list(itertools.product((1, 2), (False, True), REDUCTIONS, (np.float32, np.float64)))
    else:
        combos = MM_PAIRWISE
    for seed, (p, weighted, reduction, dtype) in enumerate(combos):
        margin = (1.0, 0.25, -0.5)[seed % 3]
        _multi_margin_case(shape, data, p, margin, weighted, reduction, dtype, seed)


# ----------------------------------------------------------------------------- multilabel_margin_loss


def _multilabel_target(rng, rows: int, classes: int) -> np.ndarray:
    """Rows of class indices ended by -1 (junk after it), some without -1, some with a repeated class."""
    target = np.empty((rows, classes), np.int64)
    for i in range(rows):
        kind = i % 4
        count = classes if kind == 0 else int(rng.integers(0, classes))
        row = rng.permutation(classes)[:count]
        if kind == 3 and count >= 2:
            row[-1] = row[0]  # a class listed twice counts twice
        junk = rng.integers(-1, classes, classes - count)
        if count < classes:
            junk[0] = -1
        target[i] = np.concatenate([row, junk])
    return target


ML_SHAPES = [(6, 5), (5,), (), (1, 1), (33, 9)]


def _multilabel_case(shape, data, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    classes = 1 if shape == () else shape[-1]
    rows = 1 if len(shape) < 2 else shape[0]
    x = _values(rng, shape, data)
    y = _multilabel_target(rng, rows, classes).reshape(shape if shape else ())
    vb, gb = _bounds(dtype, reduction, True, ULP32)
    _compare(F.multilabel_margin_loss, TF.multilabel_margin_loss, [x, y], [0], dtype, vb, gb, reduction=reduction)


@pytest.mark.parametrize(
    "shape,data,reduction,dtype",
    [
        (ML_SHAPES[0], "grid", "none", np.float32),
        (ML_SHAPES[1], "normal", "mean", np.float64),
    ],
)
def test_multilabel_margin_loss(shape, data, reduction, dtype):
    _multilabel_case(shape, data, reduction, dtype, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ML_SHAPES)
@pytest.mark.parametrize("data", ["normal", "grid"])
def test_multilabel_margin_loss_grid(shape, data):
    for seed, (reduction, dtype) in enumerate(itertools.product(REDUCTIONS, (np.float32, np.float64))):
        _multilabel_case(shape, data, reduction, dtype, seed)


# ----------------------------------------------------------------------------- elementwise losses


def _signs(rng, shape, with_zero: bool = False) -> np.ndarray:
    return rng.choice([-1.0, 0.0, 1.0] if with_zero else [-1.0, 1.0], shape)


def _ranking_case(shape, data, margin, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    x1, x2, y = _values(rng, shape, data), _values(rng, shape, data), _signs(rng, shape)
    vb, gb = _bounds(dtype, reduction, True, SUM32)
    _compare(F.margin_ranking_loss, TF.margin_ranking_loss, [x1, x2, y], [0, 1, 2], dtype, vb, gb,
             margin=margin, reduction=reduction)


def _hinge_case(shape, data, margin, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    # Target values other than +-1 add both terms, as in torch.
    x, y = _values(rng, shape, data), _signs(rng, shape, with_zero=True)
    vb, gb = _bounds(dtype, reduction, True, SUM32)
    _compare(F.hinge_embedding_loss, TF.hinge_embedding_loss, [x, y], [0], dtype, vb, gb,
             margin=margin, reduction=reduction)


def _soft_margin_case(shape, data, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    x, y = 4 * _values(rng, shape, data), _signs(rng, shape)
    vb, gb = _bounds(dtype, reduction, False, F32)
    _compare(F.soft_margin_loss, TF.soft_margin_loss, [x, y], [0], dtype, vb, gb, reduction=reduction)


def _cosine_case(shape, data, margin, reduction, dtype, seed, zero_row=False):
    rng = np.random.default_rng(seed)
    x1, x2 = _values(rng, shape, data), _values(rng, shape, data)
    if zero_row:
        x1[0] = 0.0  # cos = 0 through the eps terms; gradient x2 / sqrt(eps * |x2|^2)
    y = _signs(rng, shape[:-1], with_zero=True)
    vb, gb = _bounds(dtype, reduction, False, F32)
    _compare(F.cosine_embedding_loss, TF.cosine_embedding_loss, [x1, x2, y], [0, 1], dtype, vb, gb,
             margin=margin, reduction=reduction)


def _multilabel_soft_case(shape, weighted, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    x, y = 3 * rng.standard_normal(shape), rng.integers(0, 2, shape).astype(np.float64)
    vb, gb = _bounds(dtype, reduction, False, F32)
    if weighted:
        w = rng.uniform(0.5, 2.0, shape[-1])
        _compare(
            lambda a, b, c, **k: F.multilabel_soft_margin_loss(a, b, weight=c, **k),
            lambda a, b, c, **k: TF.multilabel_soft_margin_loss(a, b, weight=c, **k),
            [x, y, w], [0, 1, 2], dtype, vb, gb, reduction=reduction,
        )
    else:
        _compare(F.multilabel_soft_margin_loss, TF.multilabel_soft_margin_loss, [x, y], [0, 1], dtype, vb, gb,
                 reduction=reduction)


ELEMENTWISE_SHAPES = [(), (1,), (37,), (3, 5), (2, 3, 4)]
COSINE_SHAPES = [(6, 4), (4,), (1, 3), (25, 7)]
SOFT_MULTILABEL_SHAPES = [(5,), (6, 4), (2, 3, 5)]


@pytest.mark.parametrize(
    "case",
    [
        lambda: _ranking_case((3, 5), "grid", 0.5, "none", np.float32, 0),
        lambda: _hinge_case((2, 3, 4), "normal", 0.25, "sum", np.float64, 3),
        lambda: _soft_margin_case((37,), "normal", "none", np.float32, 4),
        lambda: _cosine_case((5, 3), "grid", 0.0, "none", np.float32, 7, zero_row=True),
        lambda: _cosine_case((4,), "normal", -0.5, "mean", np.float64, 7),
        lambda: _multilabel_soft_case((6, 4), True, "none", np.float32, 8),
    ],
    ids=["ranking", "hinge", "soft", "cosine-zero-row", "cosine-1d", "multilabel-soft"],
)
def test_elementwise_losses(case):
    case()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_elementwise_losses_grid(reduction, dtype):
    """Each (shape, margin) compiles; margins are static, so the grid rotates them over the shapes.

    Pairwise over (shape, reduction, dtype): a test runs the shapes whose index has the parity of
    ``reduction``'s index plus ``dtype``'s (0 float32, 1 float64), so every shape meets every reduction
    and every dtype (half of the full product). Ranking and hinge run each of their shapes on normal
    data (rounding) and on the quarter grid (exact ties at the margin), the margins 0, 0.5 (normal)
    and 0, -0.25 (grid) alternating over a test's shapes and over the tests of a shape: each margin
    meets the 0-d, one-element and multi-axis shapes and every reduction and dtype. Soft margin is
    smooth (no ties), so its data kind alternates the same way; cosine runs each shape on normal data
    at margin 0 and on the grid at 0.5 or -0.25 in turn; multilabel soft margin runs each shape
    weighted in half of the tests and unweighted in the other half. Every branch (tie, clamp, target
    value, weight) meets every reduction and dtype.
    """
    parity = REDUCTIONS.index(reduction) + (dtype == np.float64)
    seeds = itertools.count()
    for i, shape in enumerate(ELEMENTWISE_SHAPES):
        if (i + parity) % 2:
            continue
        m = (i + parity) // 2 % 2
        for data, margin in (("normal", (0.0, 0.5)[m]), ("grid", (-0.25, 0.0)[m])):
            _ranking_case(shape, data, margin, reduction, dtype, next(seeds))
            _hinge_case(shape, data, margin + 1.0, reduction, dtype, next(seeds))
        _soft_margin_case(shape, ("normal", "grid")[m], reduction, dtype, next(seeds))
    for i, shape in enumerate(COSINE_SHAPES):
        if (i + parity) % 2:
            continue
        for data, margin in (("normal", 0.0), ("grid", (0.5, -0.25)[(i + parity) // 2 % 2])):
            _cosine_case(shape, data, margin, reduction, dtype, next(seeds))
    for i, shape in enumerate(SOFT_MULTILABEL_SHAPES):
        _multilabel_soft_case(shape, bool((i + parity) % 2), reduction, dtype, next(seeds))
    _cosine_case((5, 3), "grid", 0.0, reduction, dtype, next(seeds), zero_row=True)


# ----------------------------------------------------------------------------- ties and overflow


def _grads64(jax_fn, torch_fn, arrays, diff, **kwargs):
    """Eager float64 value and gradients of ``sum(loss)``, both libraries."""
    t_in = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    t_out = torch_fn(*t_in, **kwargs)
    t_out.sum().backward()
    with jax.enable_x64(True):
        j_in = [jnp.asarray(a) for a in arrays]

        def total(*d):
            return jax_fn(*[d[diff.index(i)] if i in diff else a for i, a in enumerate(j_in)], **kwargs).sum()

        out = jax_fn(*j_in, **kwargs)
        grads = jax.jit(jax.grad(total, argnums=tuple(range(len(diff)))))(*(j_in[i] for i in diff))
    np.testing.assert_array_equal(np.asarray(out), t_out.detach().numpy())
    for g, i in zip(grads, diff):
        np.testing.assert_array_equal(np.asarray(g), t_in[i].grad.numpy())
    return [t_in[i].grad.numpy() for i in diff]


def test_ties_at_the_margin():
    """``z == 0`` exactly: the composites' ``clamp_min`` passes the gradient, the kernels' ``z > 0`` does not."""
    # margin_ranking: -1 * (0.75 - 0.25) + 0.5 == 0 -> gradient -y, y * 1 (jax's maximum would halve it).
    (g1, g2, gy) = _grads64(F.margin_ranking_loss, TF.margin_ranking_loss,
                            [np.array([0.75, 0.0]), np.array([0.25, 1.0]), np.array([1.0, 1.0])], [0, 1, 2],
                            margin=0.5, reduction="sum")
    assert g1[0] == -1.0 and g2[0] == 1.0 and gy[0] == -0.5
    # hinge: margin - x == 0 for y == -1.
    x, y = np.array([0.5, 0.75, 0.5]), np.array([-1.0, -1.0, 0.0])
    (gx,) = _grads64(lambda a, **k: F.hinge_embedding_loss(a, y, **k), lambda a, **k: TF.hinge_embedding_loss(
        a, torch.tensor(y), **k), [x], [0], margin=0.5, reduction="sum")
    assert gx[0] == -1.0 and gx[2] == 0.0
    # cosine: margin equal to cos itself (same IEEE ops as Loss.cpp, here in numpy).
    a, b = np.array([[3.0, 4.0, 0.0]]), np.array([[4.0, 3.0, 1.0]])
    eps = float(np.float32(1e-12))
    cos = float((a * b).sum() / np.sqrt(((a * a).sum() + eps) * ((b * b).sum() + eps)))
    (g1, g2) = _grads64(lambda u, v, **k: F.cosine_embedding_loss(u, v, np.array([-1.0]), **k),
                        lambda u, v, **k: TF.cosine_embedding_loss(u, v, torch.tensor([-1.0]), **k),
                        [a, b], [0, 1], margin=cos, reduction="sum")
    assert np.all(g1[0, :2] != 0)
    # multi_margin: (1 - 1.5) + 0.5 == 0 for class 1: no gradient there.
    (gx,) = _grads64(lambda u, **k: F.multi_margin_loss(u, np.array([0]), **k),
                     lambda u, **k: TF.multi_margin_loss(u, torch.tensor([0]), **k),
                     [np.array([[1.5, 0.5, 1.0]])], [0], p=2, reduction="sum")
    assert gx[0, 1] == 0.0 and gx[0, 2] != 0.0
    # multilabel_margin: (1 - 1.25) + 0.25 == 0 for the non-target class 1.
    (gx,) = _grads64(lambda u, **k: F.multilabel_margin_loss(u, np.array([[0, -1, 2]]), **k),
                     lambda u, **k: TF.multilabel_margin_loss(u, torch.tensor([[0, -1, 2]]), **k),
                     [np.array([[1.25, 0.25, 0.5]])], [0], reduction="sum")
    assert gx[0, 1] == 0.0 and gx[0, 2] != 0.0


def test_soft_margin_overflow_matches_torch():
    """float32 ``exp(-y x)`` overflows: loss inf, torch's backward kernel gives NaN (inf / inf)."""
    x, y = np.array([-100.0, 100.0, 0.5, 89.0], np.float32), np.array([1.0, 1.0, -1.0, -1.0], np.float32)
    _compare(F.soft_margin_loss, TF.soft_margin_loss, [x, y], [0], np.float32, F32, F32, reduction="none")


# ----------------------------------------------------------------------------- errors and legacy flags


def _raises_like(jax_call, torch_call) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as t_err:
            torch_call()
        with pytest.raises(type(t_err.value)) as j_err:
            jax_call()
    assert str(j_err.value) == str(t_err.value).splitlines()[0]


def _error_cases():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    tx = torch.tensor(x)
    yi = np.array([0, 1, 2])
    ml = np.array([[0, 1, -1, 2]] * 3)
    ones = np.ones(3, np.float32)

    def t(a):
        return torch.tensor(a) if isinstance(a, (np.ndarray, np.generic)) else a

    def pair(name, *args, **kwargs):
        return (
            lambda: getattr(F, name)(*args, **kwargs),
            lambda: getattr(TF, name)(*[t(a) for a in args], **{k: t(v) for k, v in kwargs.items()}),
        )

    return [
        pair("multi_margin_loss", x, yi, p=3),
        pair("multi_margin_loss", x, yi, weight=np.ones((2, 2), np.float32)),
        pair("multi_margin_loss", x, yi, weight=np.ones(5, np.float32)),
        pair("multi_margin_loss", x, yi[:2]),
        pair("multi_margin_loss", x, yi[None]),
        pair("multi_margin_loss", x, yi.astype(np.float32)),
        pair("multi_margin_loss", x, np.array([0, 1, 4])),
        pair("multi_margin_loss", x, np.array([0, -1, 2])),
        pair("multi_margin_loss", x[None], yi),
        pair("multi_margin_loss", np.zeros((3, 0), np.float32), yi),
        pair("multi_margin_loss", x, yi, reduction="bad"),
        pair("multi_margin_loss", x.astype(np.float16), yi),
        pair("multilabel_margin_loss", x, ml[:, :3]),
        pair("multilabel_margin_loss", x, ml[0]),
        pair("multilabel_margin_loss", x[0], ml),
        pair("multilabel_margin_loss", x, np.array([[0, 1, -2, 2]] * 3)),
        pair("multilabel_margin_loss", x, np.array([[0, 1, 4, 2]] * 3)),
        pair("multilabel_margin_loss", x, ml.astype(np.float32)),
        pair("multilabel_margin_loss", x[None], ml[None]),
        pair("multilabel_margin_loss", x.astype(np.float16), ml),
        pair("cosine_embedding_loss", x, x, np.ones((3, 4), np.float32)),
        pair("cosine_embedding_loss", x, x, np.ones(2, np.float32)),
        pair("cosine_embedding_loss", x[0], x[0], ones),
        pair("cosine_embedding_loss", x, x[0], ones),
        pair("cosine_embedding_loss", x, x[0], np.float32(1.0)),
        pair("cosine_embedding_loss", x, np.ones((3, 5), np.float32), ones),
        pair("margin_ranking_loss", x[0], x[0], np.ones(5, np.float32)),
        pair("margin_ranking_loss", x[0], x[:, :1], ones),
        pair("margin_ranking_loss", x, x, x, reduction="bad"),
        pair("hinge_embedding_loss", x, np.ones(5, np.float32)),
        pair("soft_margin_loss", x[0], np.ones((3, 4), np.float32)),
        pair("soft_margin_loss", x, np.ones(5, np.float32)),
        pair("multilabel_soft_margin_loss", x, x, reduction="bad"),
        pair("multilabel_soft_margin_loss", x, x, reduction="elementwise_mean"),
        pair("multilabel_soft_margin_loss", np.float32(1.0), np.float32(1.0)),
        pair("multilabel_soft_margin_loss", x, np.ones(5, np.float32)),
        (lambda: jnn.MultiMarginLoss(p=0), lambda: tnn.MultiMarginLoss(p=0)),
        (lambda: jnn.MultiMarginLoss(weight=np.ones((2, 2))), lambda: tnn.MultiMarginLoss(weight=torch.ones(2, 2))),
        (lambda: jnn.MultiMarginLoss(weight=np.ones(3))(x, yi), lambda: tnn.MultiMarginLoss(weight=torch.ones(3))(tx,
                                                                                                   torch.tensor(yi))),
    ]


@pytest.mark.parametrize("index", range(len(_error_cases())))
def test_errors_match_torch(index):
    _raises_like(*_error_cases()[index])


FUNCTIONALS = {
    "cosine_embedding_loss": lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((3, 4)),
                                          np.array([1.0, -1.0, 1.0])),
    "hinge_embedding_loss": lambda rng: (rng.standard_normal((3, 4)), rng.choice([-1.0, 1.0], (3, 4))),
    "margin_ranking_loss": lambda rng: (rng.standard_normal(5), rng.standard_normal(5), rng.choice([-1.0, 1.0], 5)),
    "multilabel_margin_loss": lambda rng: (rng.standard_normal((3, 4)), np.array([[0, 2, -1, 1]] * 3)),
    "multilabel_soft_margin_loss": lambda rng: (rng.standard_normal((3, 4)), rng.integers(0, 2, (3, 4)) * 1.0),
    "multi_margin_loss": lambda rng: (rng.standard_normal((3, 4)), np.array([0, 3, 1])),
    "soft_margin_loss": lambda rng: (rng.standard_normal((3, 4)), rng.choice([-1.0, 1.0], (3, 4))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONALS))
def test_legacy_size_average_reduce(name):
    arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in FUNCTIONALS[name](np.random.default_rng(3))]
    for size_average, reduce in [(False, None), (True, False)]:  # 'sum', 'none'; get_string is test_loss.py's
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            got = getattr(F, name)(*arrays, size_average=size_average, reduce=reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(TF, name)(*map(torch.tensor, arrays), size_average=size_average, reduce=reduce)
        _assert_close(got, want.numpy(), F32, f"{name} {size_average} {reduce}")


# ----------------------------------------------------------------------------- modules


def _module_cases():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    x2 = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.uniform(0.5, 2, 3).astype(np.float32)
    sign4 = np.array([1.0, -1.0, -1.0, 1.0], np.float32)
    signs = rng.choice([-1.0, 1.0], (4, 3)).astype(np.float32)
    return [
        ("CosineEmbeddingLoss", dict(margin=0.2, reduction="none"), (x, x2, sign4)),
        ("HingeEmbeddingLoss", dict(margin=0.5), (x, signs)),
        ("MarginRankingLoss", dict(margin=0.1, reduction="sum"), (x, x2, signs)),
        ("MultiLabelMarginLoss", dict(), (x, np.array([[0, -1, 1], [2, 1, -1], [0, 1, 2], [-1, 0, 0]]))),
        ("MultiLabelSoftMarginLoss", dict(weight=w, reduction="none"), (x, (signs > 0).astype(np.float32))),
        ("MultiLabelSoftMarginLoss", dict(), (x, (signs > 0).astype(np.float32))),
        ("MultiMarginLoss", dict(p=2, margin=0.5, weight=w, reduction="sum"), (x, np.array([0, 2, 1, 2]))),
        ("MultiMarginLoss", dict(), (x, np.array([0, 2, 1, 2]))),
        ("SoftMarginLoss", dict(reduction="none"), (x, signs)),
    ]


@pytest.mark.parametrize("index", range(len(_module_cases())))
def test_modules_match_torch(index):
    name, kwargs, arrays = _module_cases()[index]
    t_mod = getattr(tnn, name)(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
    j_mod = getattr(jnn, name)(**kwargs)
    want = t_mod(*map(torch.tensor, arrays)).numpy()
    _assert_close(j_mod(*map(jnp.asarray, arrays)), want, F32, name)
    # state_dict keys (``weight`` only when given) and values are torch's.
    t_state = t_mod.state_dict()
    flat = nnx.to_flat_state(nnx.state(j_mod, jnn.Buffer))
    assert sorted(k for k, _ in flat) == [(k,) for k in sorted(t_state)]
    for k, v in t_state.items():
        np.testing.assert_array_equal(np.asarray(getattr(j_mod, k)[...]), v.numpy())
    for attr in ("reduction", "margin", "p"):
        if hasattr(t_mod, attr):
            assert getattr(j_mod, attr) == getattr(t_mod, attr), attr
    if "weight" not in kwargs:
        return
    # A weight buffer through nnx.split / merge under jit.
    graph, state = nnx.split(j_mod)
    jitted = jax.jit(lambda s, *a: nnx.merge(graph, s)(*a))(state, *map(jnp.asarray, arrays))
    _assert_close(jitted, want, F32, name + " jit")


@pytest.mark.parametrize("name", ["CosineEmbeddingLoss", "MultiMarginLoss", "MultiLabelSoftMarginLoss",
                                  "SoftMarginLoss"])
def test_module_legacy_flags(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for size_average, reduce in [(False, None), (None, False)]:
            mine = getattr(jnn, name)(size_average=size_average, reduce=reduce)
            assert mine.reduction == getattr(tnn, name)(size_average=size_average, reduce=reduce).reduction
