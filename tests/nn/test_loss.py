"""jax_impl's losses against torch.nn.functional and torch.nn's loss modules.

Values and gradients (``jax.grad`` of ``sum(loss * cotangent)`` vs torch
autograd of the same scalar) w.r.t. the input, and w.r.t. the target where
torch differentiates it (regression losses, BCE, KL, probability targets).

Error measure: ``max|jax - torch| / max|torch|`` over finite elements (inf and
NaN must sit at the same places with the same value). An elementwise relative
error is meaningless where a loss cancels to ~0 (``(1-t)x - log_sigmoid(x)``
for large ``x``), so the scale is the array's largest magnitude, as in
``test_functional.py``.

Tolerances, measured over 7000-element arrays and these draws
(torch 2.13 CPU, AVX-512; jax 0.10.2 XLA:CPU):

- mse / l1 / smooth_l1 / huber, ``reduction='none'``: bit-identical values
  and gradients (torch's kernel operation order reproduced; the
  ``'mean'``/``'sum'`` gradients too). Exception: torch's backward kernels
  run a scalar code path on the last ``numel % 32`` elements, which
  multiplies by ``beta``/``delta`` in double; for thresholds that are not
  float32-exact those tail gradients can be 1 ULP off (seen: 5 of 7000 for
  huber ``delta=0.3``). Asserted bit-exact for float32-exact thresholds,
  else at ``ULP32``.
- Scalar ``'mean'``/``'sum'`` values: the reduction adds the elements in
  torch's ``cascade_sum`` order below 32768 elements (bit-identical sums of
  bit-identical elements); above, torch splits the sum across its threads and
  XLA adds in its own order.
- Losses through ``log``/``log1p``/``exp`` (BCE, BCE-with-logits, KL,
  cross entropy, log_softmax, softmax): torch's CPU kernels use SLEEF, XLA its
  own polynomials, 1 ULP apart on a fraction of elements. Worst seen: values
  1.1e-7, gradients 2.6e-7 (log_softmax/softmax along a 1000-long axis
  9.1e-7, from the class-axis sums) in float32; 1.3e-15 / 2.7e-15 in float64.

Bounds asserted: ``F32 = 1e-6`` (DESIGN's float32 loss bound, above every
measured value), ``F64 = 1e-14`` (3.7x the worst float64 value seen).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as TF
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jax_impl.nn import _functional_loss as F
from jax_impl.nn.modules import loss as L

FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F32 = 1e-6
F64 = 1e-14
ULP32 = 2**-23  # one float32 ULP relative to the array's scale
DTYPES = [np.float32, np.float64]


def _bound(dtype) -> float:
    return F32 if dtype == np.float32 else F64


def _check(got, want, bound: float, what: str, scale: float | None = None) -> float:
    """Assert ``got`` matches ``want`` to ``bound`` relative to ``max|want|``; returns the error."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    if not finite.any():
        return 0.0
    scale = max(np.abs(want[finite]).max(), scale or 0.0, np.finfo(np.float64).tiny)
    err = float(np.abs(got[finite] - want[finite]).max() / scale)
    assert err <= bound, f"{what}: {err:.3g} > {bound:.3g}"
    return err


@functools.cache
def _jitted(jax_fn, static: tuple, diff: tuple):
    """One compiled ``(value, vjp(cotangent))`` function, cached so repeated shapes reuse it."""
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


def _compare(jax_fn, torch_fn, arrays, diff, dtype, bound, exact=False, value_scale=None, grad_bound=None, **static):
    """Value and gradients (w.r.t. ``arrays[i]`` for ``i in diff``) of jax vs torch.

    Both functions are called as ``fn(*arrays, **static)``. Integer arrays stay
    integer. With ``exact`` every float must be bit-identical. ``value_scale``
    replaces ``max|want|`` for the value: a sum whose terms cancel is only
    accurate relative to the sum of the terms' magnitudes.
    """
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    t_in = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    t_out = torch_fn(*t_in, **static)
    ct = np.random.default_rng(7).standard_normal(tuple(t_out.shape)).astype(dtype)
    if diff:
        (t_out * torch.tensor(ct)).sum().backward()
    compiled = _jitted(jax_fn, tuple(sorted(static.items())), tuple(diff))
    with jax.enable_x64(dtype == np.float64):
        j_out, grads = compiled(jnp.asarray(ct), *(jnp.asarray(a) for a in arrays))
        assert j_out.dtype == dtype
    pairs = [("value", j_out, t_out.detach().numpy())]
    pairs += [(f"grad[{i}]", g, t_in[i].grad.numpy()) for g, i in zip(grads, diff)]
    for what, got, want in pairs:
        if exact:
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=what)
        else:
            if what == "value":
                _check(got, want, bound, what, value_scale)
            else:
                _check(got, want, grad_bound or bound, what)


REDUCTIONS = st.sampled_from(["none", "mean", "sum"])
# A few fixed shapes (incl. 0-d and a 37-element tail) so compiled functions are reused.
SHAPES = st.sampled_from([(), (1,), (37,), (3, 5), (2, 3, 4), (2, 1, 3, 2)])
LAST_AXIS_SHAPES = st.sampled_from([(5,), (4, 3), (2, 3, 4)])


def _rng(seed):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- regression


@FEW
@given(shape=SHAPES, reduction=REDUCTIONS, seed=st.integers(0, 2**16), dtype=st.sampled_from(DTYPES))
def test_mse_l1_bit_identical(shape, reduction, seed, dtype):
    rng = _rng(seed)
    x, t = rng.standard_normal(shape) * 3, rng.standard_normal(shape)
    # 'none' values and all gradients are elementwise: bit-identical.
    exact = reduction == "none"
    for jf, tf in [(F.mse_loss, TF.mse_loss), (F.l1_loss, TF.l1_loss)]:
        _compare(jf, tf, [x, t], [0, 1], dtype, _bound(dtype), exact=exact, reduction=reduction)


@pytest.mark.parametrize(("reduction", "dtype"), [("sum", np.float32)] + [
    pytest.param(r, d, marks=pytest.mark.slow) for r, d in (("sum", np.float64), ("mean", np.float32),
                                                            ("mean", np.float64))])
def test_sum_and_mean_add_in_torchs_order(reduction, dtype):
    """'sum' and 'mean' add the elements in ATen's cascade_sum order below 32768 elements (above, torch splits
    the sum across its threads): with bit-identical elements (mse) the reduced value is torch's, bit for bit,
    at sizes around the vector width, the cascade's block sizes and a VAE batch's 30 x 64 BCE terms."""
    rng = _rng(7)
    loss = jax.jit(functools.partial(F.mse_loss, reduction=reduction))
    with jax.enable_x64(dtype == np.float64):
        for n in (1, 3, 8, 17, 100, 1920, 4099, 32767):
            x, t = rng.standard_normal(n).astype(dtype) * 3, rng.standard_normal(n).astype(dtype)
            ours = np.asarray(loss(jnp.asarray(x), jnp.asarray(t)))
            theirs = TF.mse_loss(torch.from_numpy(x), torch.from_numpy(t), reduction=reduction).numpy()
            assert ours.tobytes() == theirs.tobytes(), (n, float(ours), float(theirs))


@FEW
@given(
    shape=SHAPES,
    reduction=REDUCTIONS,
    threshold=st.sampled_from([0.0, 0.5, 1.0, 2.0, 0.3, 1.7]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(DTYPES),
)
def test_smooth_l1_huber(shape, reduction, threshold, seed, dtype):
    rng = _rng(seed)
    x, t = rng.standard_normal(shape) * 2, rng.standard_normal(shape)
    if x.size:
        x.flat[0] = t.flat[0] + threshold  # exactly on the branch boundary
    exact_threshold = float(np.float32(threshold)) == threshold
    bound = _bound(dtype) if reduction != "none" or not exact_threshold else 0.0
    if reduction == "none" and not exact_threshold:
        bound = ULP32 if dtype == np.float32 else F64  # torch's scalar tail path, see module doc
    _compare(
        F.smooth_l1_loss,
        TF.smooth_l1_loss,
        [x, t],
        [0, 1],
        dtype,
        bound,
        bound == 0.0,
        reduction=reduction,
        beta=threshold,
    )
    if threshold > 0:
        _compare(
            F.huber_loss,
            TF.huber_loss,
            [x, t],
            [0, 1],
            dtype,
            bound,
            bound == 0.0,
            reduction=reduction,
            delta=threshold,
        )


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_weighted_regression(name, reduction):
    rng = _rng(3)
    x, t, w = rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), rng.uniform(0, 2, (4, 5))
    _compare(_weighted_j, _weighted_t, [x, t, w], [0, 1], np.float32, F32, name=name, reduction=reduction)


def _weighted_j(a, b, w, *, name, reduction):
    return getattr(F, name)(a, b, reduction=reduction, weight=w)


def _weighted_t(a, b, w, *, name, reduction):
    return getattr(TF, name)(a, b, reduction=reduction, weight=w)


def test_regression_broadcast_warns():
    x, t = np.ones((3, 4), np.float32), np.zeros((4,), np.float32)
    with pytest.warns(UserWarning, match="Using a target size"):
        got = jax.jit(F.mse_loss)(x, t)  # one compilation (eagerly, each op compiles on its own); warns tracing
    with pytest.warns(UserWarning, match="Using a target size"):
        want = TF.mse_loss(torch.tensor(x), torch.tensor(t)).numpy()
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- BCE


@FEW
@given(
    shape=SHAPES,
    reduction=REDUCTIONS,
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(DTYPES),
)
def test_binary_cross_entropy(shape, reduction, weighted, seed, dtype):
    rng = _rng(seed)
    p, t = rng.uniform(0, 1, shape), rng.uniform(0, 1, shape)
    flat = p.reshape(-1)
    flat[::3] = 0.0  # log clamps at -100
    flat[1::3] = 1.0
    t.reshape(-1)[::2] = np.round(t.reshape(-1)[::2])
    arrays = [p, t] + ([rng.uniform(0, 2, shape[-1:])] if weighted else [])
    _compare(F.binary_cross_entropy, TF.binary_cross_entropy, arrays, [0, 1], dtype, _bound(dtype), reduction=reduction)


def test_binary_cross_entropy_size_mismatch():
    msg = r"Using a target size \(torch.Size\(\[4\]\)\) that is different to the input size \(torch.Size\(\[3, 4\]\)\) is deprecated"
    with pytest.raises(ValueError, match=msg):
        F.binary_cross_entropy(jnp.full((3, 4), 0.5), jnp.zeros(4))
    with pytest.raises(ValueError, match=msg):
        TF.binary_cross_entropy(torch.full((3, 4), 0.5), torch.zeros(4))


@FEW
@given(
    shape=LAST_AXIS_SHAPES,
    reduction=REDUCTIONS,
    scale=st.sampled_from([1.0, 30.0, 88.0, 1e4]),
    weight_kind=st.sampled_from([None, "last", "full"]),
    pos_kind=st.sampled_from([None, "last", "one", "full"]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(DTYPES),
)
def test_binary_cross_entropy_with_logits(shape, reduction, scale, weight_kind, pos_kind, seed, dtype):
    rng = _rng(seed)
    x, t = rng.standard_normal(shape) * scale, rng.uniform(0, 1, shape)
    t.reshape(-1)[::2] = np.round(t.reshape(-1)[::2])
    pick = {None: None, "last": shape[-1:], "one": (1,), "full": shape}
    w = None if weight_kind is None else rng.uniform(0, 2, pick[weight_kind])
    pw = None if pos_kind is None else rng.uniform(0, 3, pick[pos_kind])
    arrays = [x, t] + [a for a in (w, pw) if a is not None]
    flags = dict(has_w=w is not None, has_pw=pw is not None, reduction=reduction)
    _compare(_bcel_j, _bcel_t, arrays, [0, 1], dtype, _bound(dtype), **flags)


def _bcel(fn, a, b, *rest, has_w, has_pw, reduction):
    rest = list(rest)
    w = rest.pop(0) if has_w else None
    pw = rest.pop(0) if has_pw else None
    return fn(a, b, w, reduction=reduction, pos_weight=pw)


def _bcel_j(*args, **flags):
    return _bcel(F.binary_cross_entropy_with_logits, *args, **flags)


def _bcel_t(*args, **flags):
    return _bcel(TF.binary_cross_entropy_with_logits, *args, **flags)


# ----------------------------------------------------------------------------- KL


@FEW
@given(
    shape=LAST_AXIS_SHAPES,
    reduction=st.sampled_from(["none", "mean", "sum", "batchmean"]),
    log_target=st.booleans(),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(DTYPES),
)
def test_kl_div(shape, reduction, log_target, seed, dtype):
    rng = _rng(seed)
    x = np.log(rng.dirichlet(np.ones(shape[-1]), shape[:-1]))
    t = rng.dirichlet(np.ones(shape[-1]), shape[:-1])
    t.reshape(-1)[::3] = 0.0  # where(t > 0, ...) branch
    if log_target:
        t = np.log(t + 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's 'mean' deprecation note
        terms = np.abs(TF.kl_div(torch.tensor(x), torch.tensor(t), reduction="none", log_target=log_target).numpy())
        scale = {"none": None, "sum": terms.sum(), "mean": terms.mean(), "batchmean": terms.sum() / shape[0]}[reduction]
        kw = dict(reduction=reduction, log_target=log_target)
        _compare(F.kl_div, TF.kl_div, [x, t], [0, 1], dtype, _bound(dtype), value_scale=scale, **kw)


# ----------------------------------------------------------------------------- cross entropy / nll


@st.composite
def class_case(draw):
    # unbatched (C,), (N, C), and K-dim (N, C, d1, ...) up to K = 3; C = 1 included.
    shape = draw(st.sampled_from([(5,), (4, 3), (3, 1), (3, 5, 2), (2, 4, 3, 2), (2, 3, 2, 1, 2)]))
    return shape, draw(st.integers(0, 2**16))


@FEW
@given(
    case=class_case(),
    reduction=REDUCTIONS,
    weighted=st.booleans(),
    ignore=st.sampled_from([-100, 0, 2]),
    smoothing=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    scale=st.sampled_from([1.0, 88.0, 1e4]),
    dtype=st.sampled_from(DTYPES),
)
def test_cross_entropy_class_indices(case, reduction, weighted, ignore, smoothing, scale, dtype):
    shape, seed = case
    rng = _rng(seed)
    c = shape[0] if len(shape) == 1 else shape[1]
    x = rng.standard_normal(shape) * scale
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    y = rng.integers(0, c, tshape)
    y[rng.uniform(size=tshape) < 0.3] = ignore  # some (possibly all) targets ignored
    arrays = [x, y] + ([rng.uniform(0.1, 2, c)] if weighted else [])
    kw = dict(ignore_index=ignore, reduction=reduction, grad_bound=_softmax_grad_bound(dtype, scale))
    _compare(F.cross_entropy, TF.cross_entropy, arrays, [0], dtype, _bound(dtype), label_smoothing=smoothing, **kw)
    # nll_loss on the same data as log-probabilities.
    _compare(_nll_j, _nll_t, arrays, [0], dtype, _bound(dtype), **kw)


def _softmax_grad_bound(dtype, scale):
    """Gradient bound through log_softmax for logits of magnitude ``scale``.

    The gradient is ``g - exp(out) * sum(g)``; for the winning class that is
    ``g (1 - p)`` with ``p -> 1``. ``out = -log(sum exp(x - max))`` there, and
    torch's and XLA's ``log`` differ by 1 ULP on some inputs (seen: -6.3029927e-4
    vs -6.3029921e-4), which the cancellation ``1 - p`` amplifies. Worst seen
    3.45e-6 (float32, |logits| ~ 88, CI draws); 2.6e-7 for unit logits.
    """
    if dtype == np.float32 and scale > 1.0:
        return 1e-5
    return _bound(dtype)


def _nll_j(a, *rest, **kw):
    return F.nll_loss(F.log_softmax(a, 0 if a.ndim == 1 else 1), *rest, **kw)


def _nll_t(a, *rest, **kw):
    return TF.nll_loss(TF.log_softmax(a, 0 if a.ndim == 1 else 1), *rest, **kw)


@pytest.mark.parametrize(("shape", "weighted"), [((7,), False), ((5, 7), True), ((3, 7, 4), False), ((3, 7, 4), True)])
def test_nll_loss_forward_mode_matches_torch(shape, weighted):
    """nll_loss's tangent (a masked sum over classes, whose transpose is a select) against torch.func.jvp,
    ignored targets included; and its reverse-mode gradient stores no scatter of the input's size."""
    rng = np.random.default_rng(len(shape) + 3 * weighted)
    c = shape[0] if len(shape) == 1 else shape[1]
    x, dx = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    y = rng.integers(0, c, tshape)
    if y.ndim:
        y.reshape(-1)[0] = -100
    w = rng.uniform(0.1, 2, c).astype(np.float32) if weighted else None
    kw = {} if w is None else {"weight": w}
    tw = {} if w is None else {"weight": torch.from_numpy(w)}
    _, theirs = torch.func.jvp(lambda a: TF.nll_loss(a, torch.from_numpy(y), **tw), (torch.from_numpy(x),),
                               (torch.from_numpy(dx),))
    _, mine = jax.jvp(lambda a: F.nll_loss(a, jnp.asarray(y), **kw), (jnp.asarray(x),), (jnp.asarray(dx),))
    np.testing.assert_array_equal(np.asarray(mine), theirs.numpy())
    grad = jax.jit(jax.grad(lambda a: F.nll_loss(F.log_softmax(a, 0 if a.ndim == 1 else 1), jnp.asarray(y), **kw)))
    assert "scatter" not in grad.lower(jnp.asarray(x, jnp.float32)).compile().as_text()


@FEW
@given(
    case=class_case(),
    reduction=REDUCTIONS,
    weighted=st.booleans(),
    smoothing=st.sampled_from([0.0, 0.2, 1.0]),
    dtype=st.sampled_from(DTYPES),
)
def test_cross_entropy_probabilities(case, reduction, weighted, smoothing, dtype):
    shape, seed = case
    rng = _rng(seed)
    class_dim = 0 if len(shape) == 1 else 1
    c = shape[class_dim]
    x = rng.standard_normal(shape) * 5
    t = np.moveaxis(rng.dirichlet(np.ones(c), np.moveaxis(x, class_dim, -1).shape[:-1]), -1, class_dim)
    arrays = [x, t] + ([rng.uniform(0.1, 2, c)] if weighted else [])
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    _compare(F.cross_entropy, TF.cross_entropy, arrays, [0, 1], dtype, _bound(dtype), **kw)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_all_ignored(smoothing, weighted, reduction):
    """Every target ignored: mean is 0/0 = NaN, sum 0, none zeros (as torch)."""
    x = np.random.default_rng(0).standard_normal((3, 4, 2)).astype(np.float32)
    y = np.full((3, 2), -100)
    w = np.ones(4, np.float32) if weighted else None
    want = TF.cross_entropy(
        torch.tensor(x),
        torch.tensor(y),
        None if w is None else torch.tensor(w),
        reduction=reduction,
        label_smoothing=smoothing,
    ).numpy()
    # Jitted: one compilation (eagerly, each op compiles on its own).
    got = jax.jit(functools.partial(F.cross_entropy, reduction=reduction, label_smoothing=smoothing))(x, y, w)
    np.testing.assert_array_equal(np.asarray(got), want)
    if reduction == "mean":
        assert np.isnan(want)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_log_softmax_softmax(dim, dtype):
    x = np.random.default_rng(dim + 5).standard_normal((6, 5, 4)) * 10
    for jf, tf in [(F.log_softmax, TF.log_softmax), (F.softmax, TF.softmax)]:
        _compare(jf, tf, [x], [0], dtype, _bound(dtype), dim=dim)


# ----------------------------------------------------------------------------- errors and legacy flags


def _raises_like(jax_call, torch_call):
    with pytest.raises(Exception) as t_err:
        torch_call()
    with pytest.raises(type(t_err.value)) as j_err:
        jax_call()
    assert str(j_err.value) == str(t_err.value)


def test_errors_match_torch():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y = np.array([0, 1, 2])
    tx, ty = torch.tensor(x), torch.tensor(y)
    tprob = torch.softmax(tx, 1)
    prob = tprob.numpy()
    cases = [
        (lambda: F.cross_entropy(x, y, reduction="bad"), lambda: TF.cross_entropy(tx, ty, reduction="bad")),
        (lambda: F.mse_loss(x, x, reduction="avg"), lambda: TF.mse_loss(tx, tx, reduction="avg")),
        (lambda: F.kl_div(x, x, reduction="bad"), lambda: TF.kl_div(tx, tx, reduction="bad")),
        (lambda: F.cross_entropy(x, y, label_smoothing=1.5), lambda: TF.cross_entropy(tx, ty, label_smoothing=1.5)),
        (
            lambda: F.cross_entropy(x, prob, label_smoothing=1.5),
            lambda: TF.cross_entropy(tx, tprob, label_smoothing=1.5),
        ),
        (lambda: F.cross_entropy(x, prob, ignore_index=1), lambda: TF.cross_entropy(tx, tprob, ignore_index=1)),
        (lambda: F.nll_loss(x, np.array([0, 1, 5])), lambda: TF.nll_loss(tx, torch.tensor([0, 1, 5]))),
        (lambda: F.cross_entropy(x, y[:2]), lambda: TF.cross_entropy(tx, ty[:2])),
        (lambda: F.cross_entropy(x, y, np.ones(3)), lambda: TF.cross_entropy(tx, ty, torch.ones(3))),
        (
            lambda: F.cross_entropy(np.zeros((2, 3, 4)), np.zeros((2, 5), int)),
            lambda: TF.cross_entropy(torch.zeros(2, 3, 4), torch.zeros(2, 5, dtype=torch.long)),
        ),
        (lambda: F.binary_cross_entropy_with_logits(x, x[0]), lambda: TF.binary_cross_entropy_with_logits(tx, tx[0])),
        (lambda: F.smooth_l1_loss(x, x, beta=-1.0), lambda: TF.smooth_l1_loss(tx, tx, beta=-1.0)),
        (lambda: F.huber_loss(x, x, delta=0.0), lambda: TF.huber_loss(tx, tx, delta=0.0)),
        (lambda: F.log_softmax(x, 2), lambda: TF.log_softmax(tx, 2)),
    ]
    for jax_call, torch_call in cases:
        _raises_like(jax_call, torch_call)


@pytest.mark.parametrize("size_average", [None, True, False])
@pytest.mark.parametrize("reduce", [None, True, False])
def test_legacy_size_average_reduce(size_average, reduce):
    if size_average is None and reduce is None:
        return
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    y = np.array([0, 3, 1])
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        got = F.cross_entropy(x, y, size_average=size_average, reduce=reduce)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = TF.cross_entropy(torch.tensor(x), torch.tensor(y), size_average=size_average, reduce=reduce).numpy()
        module = L.CrossEntropyLoss(size_average=size_average, reduce=reduce)
        assert module.reduction == tnn.CrossEntropyLoss(size_average=size_average, reduce=reduce).reduction
    _check(got, want, F32, "legacy")


# ----------------------------------------------------------------------------- modules


def _module_cases(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.standard_normal((4, 3)).astype(np.float32)
    p, q = rng.uniform(0, 1, (4, 3)).astype(np.float32), rng.uniform(0, 1, (4, 3)).astype(np.float32)
    y = np.array([0, 2, -100, 1])
    w, pw = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    logp, prob = (
        np.log(rng.dirichlet(np.ones(3), 4)).astype(np.float32),
        rng.dirichlet(np.ones(3), 4).astype(np.float32),
    )
    return [
        ("CrossEntropyLoss", dict(weight=w, label_smoothing=0.1, reduction="sum"), x, y),
        ("NLLLoss", dict(weight=w, ignore_index=2), logp, np.array([0, 2, 2, 1])),
        ("BCELoss", dict(weight=w, reduction="none"), p, q),
        ("BCEWithLogitsLoss", dict(weight=w, pos_weight=pw), x, q),
        ("MSELoss", dict(reduction="sum"), x, t),
        ("L1Loss", dict(), x, t),
        ("SmoothL1Loss", dict(beta=0.5), x, t),
        ("HuberLoss", dict(delta=0.5, reduction="none"), x, t),
        ("KLDivLoss", dict(reduction="batchmean", log_target=False), logp, prob),
    ]


@pytest.mark.parametrize("index", range(9))
def test_modules_match_torch(index):
    name, kwargs, a, b = _module_cases(np.random.default_rng(index))[index]
    t_mod = getattr(tnn, name)(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
    j_mod = getattr(L, name)(**kwargs)
    want = t_mod(torch.tensor(a), torch.tensor(b)).numpy()
    _check(j_mod(jnp.asarray(a), jnp.asarray(b)), want, F32, name)
    # state_dict keys and values (the buffers) are torch's.
    state = nnx.state(j_mod, L.Buffer)
    t_state = t_mod.state_dict()
    assert sorted(k for k, _ in nnx.to_flat_state(state)) == [(k,) for k in sorted(t_state)]
    for k, v in t_state.items():
        np.testing.assert_array_equal(np.asarray(getattr(j_mod, k)[...]), v.numpy())
    # jit through nnx.split / merge.
    graph, params = nnx.split(j_mod)
    jitted = jax.jit(lambda s, u, v: nnx.merge(graph, s)(u, v))(params, jnp.asarray(a), jnp.asarray(b))
    _check(jitted, want, F32, name + " jit")


@pytest.mark.parametrize("reduction", ["none", "mean", pytest.param("sum", marks=pytest.mark.slow),
                                       pytest.param("batchmean", marks=pytest.mark.slow)])  # the default tier's budget
def test_kl_div_negative_and_nan_targets_match_torch(reduction):
    """torch's xlogy(t, t) - t * x: NaN loss for t < 0 or NaN t, input gradient -t (forward and backward)."""
    x = np.array([[-1.0, -2.0, -0.5], [-1.0, -np.inf, 0.3]])
    t = np.array([[-0.5, np.nan, 0.0], [0.3, 0.0, 2.0]])
    tx, tt = torch.tensor(x, requires_grad=True), torch.tensor(t, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_out = TF.kl_div(tx, tt, reduction=reduction)
        t_out.sum().backward()
        with jax.enable_x64(True):
            def loss(a, b):
                out = F.kl_div(a, b, reduction=reduction)
                return out.sum(), out

            # One compilation of the loss and its gradient (eagerly, each op of both compiles on its own).
            (gx, gt), out = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))(jnp.asarray(x), jnp.asarray(t))
    np.testing.assert_allclose(np.asarray(out), t_out.detach().numpy(), rtol=1e-15, equal_nan=True)
    np.testing.assert_allclose(np.asarray(gx), tx.grad.numpy(), rtol=1e-15, equal_nan=True)
    np.testing.assert_allclose(np.asarray(gt), tt.grad.numpy(), rtol=1e-15, equal_nan=True)
