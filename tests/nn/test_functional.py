"""jax_impl.nn.functional against torch.nn.functional: forward and backward.

Backward compares ``jax.grad(sum(out * cotangent))`` with torch autograd of the
same scalar, for every input (data, weight, bias).

Tolerances (float32, measured over these draws):
- conv / conv_transpose / linear: worst seen ~3e-7 relative to the output scale
  (summation order differs from torch's CPU kernels); asserted at rtol=atol=1e-5
  as DESIGN asks for float32 convolutions.
- max pools: bit-exact (a selection, no arithmetic).
- avg / adaptive avg pools: ~1e-7 (sum order and divide vs multiply);
  asserted at 1e-6.
- pad: forward exact; backward ~1e-7 (replicate/circular sum repeated
  cotangents in another order); asserted at 1e-6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jax_impl.nn import functional as F
from tests._tiers import slow_after

FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compare(jax_fn, torch_fn, arrays, rtol, atol, seed=0):
    """Forward and vjp of ``jax_fn`` vs ``torch_fn`` on float32 ``arrays``."""
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    t_out = torch_fn(*t_in)
    ct = np.random.default_rng(seed).standard_normal(tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.tensor(ct)).sum().backward()

    def forward_and_grads(*xs):
        out, vjp = jax.vjp(jax_fn, *xs)
        return out, vjp(jnp.asarray(ct))

    # One compilation of the forward and its VJP per example (two jits compile the forward twice;
    # eagerly, every op of both compiles on its own).
    j_out, grads = jax.jit(forward_and_grads)(*[jnp.asarray(a) for a in arrays])
    assert j_out.shape == tuple(t_out.shape)
    # atol scales with the largest |value|: float32 sums with cancellation lose
    # digits relative to the biggest term, not to each element.
    want = t_out.detach().numpy()
    np.testing.assert_allclose(np.asarray(j_out), want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max(initial=0.0)))

    for g, t in zip(grads, t_in):
        want = t.grad.numpy()
        np.testing.assert_allclose(np.asarray(g), want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max(initial=0.0)))


def _randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- conv

CONV = {1: (F.conv1d, TF.conv1d), 2: (F.conv2d, TF.conv2d), 3: (F.conv3d, TF.conv3d)}
CONV_T = {
    1: (F.conv_transpose1d, TF.conv_transpose1d),
    2: (F.conv_transpose2d, TF.conv_transpose2d),
    3: (F.conv_transpose3d, TF.conv_transpose3d),
}


@st.composite
def conv_case(draw, transpose=False):
    nd = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.sampled_from([1, 2]))
    c_in, c_out = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    hi = {1: 5, 2: 4, 3: 3}[nd]
    k = tuple(draw(st.integers(1, hi)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    if transpose:
        p = tuple(draw(st.integers(0, di * (ki - 1))) for ki, di in zip(k, d))
        op = tuple(draw(st.integers(0, max(si, di) - 1)) for si, di in zip(s, d))
        size = tuple(draw(st.integers(1, 5)) for _ in range(nd))
        ok = all((L - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 >= 1 for L, si, pi, di, ki, oi in zip(size, s, p, d, k, op))
        padding = (p, op)
    else:
        padding = draw(st.one_of(st.just("same"), st.just("valid"), st.integers(0, 2),
                                 st.tuples(*[st.integers(0, 2)] * nd)))
        if padding == "same":
            s = (1,) * nd
        pads = (0,) * nd if isinstance(padding, str) else ((padding,) * nd if isinstance(padding, int) else padding)
        size = tuple(draw(st.integers(1, 7)) for _ in range(nd))
        ok = padding == "same" or all(L + 2 * pi >= di * (ki - 1) + 1 for L, pi, di, ki in zip(size, pads, d, k))
    if not ok:
        size = tuple(L + 12 for L in size)
    bias = draw(st.booleans())
    batch = draw(st.sampled_from([None, 1, 2]))
    return nd, groups, c_in, c_out, k, d, s, padding, size, bias, batch


@FEW
@given(conv_case(), st.integers(0, 2**16))
def test_conv_matches_torch(case, seed):
    nd, groups, c_in, c_out, k, d, s, padding, size, bias, batch = case
    rng = np.random.default_rng(seed)
    x = _randn(rng, *(() if batch is None else (batch,)), c_in, *size)
    arrays = [x, _randn(rng, c_out, c_in // groups, *k)] + ([_randn(rng, c_out)] if bias else [])
    jfn, tfn = CONV[nd]
    kw = dict(stride=s, padding=padding, dilation=d, groups=groups)
    _compare(lambda x, w, *b: jfn(x, w, *b, **kw), lambda x, w, *b: tfn(x, w, *b, **kw), arrays, 1e-5, 1e-5, seed)


@FEW
@given(conv_case(transpose=True), st.integers(0, 2**16))
def test_conv_transpose_matches_torch(case, seed):
    nd, groups, c_in, c_out, k, d, s, (p, op), size, bias, batch = case
    rng = np.random.default_rng(seed)
    x = _randn(rng, *(() if batch is None else (batch,)), c_in, *size)
    arrays = [x, _randn(rng, c_in, c_out // groups, *k)] + ([_randn(rng, c_out)] if bias else [])
    jfn, tfn = CONV_T[nd]
    kw = dict(stride=s, padding=p, output_padding=op, groups=groups, dilation=d)
    _compare(lambda x, w, *b: jfn(x, w, *b, **kw), lambda x, w, *b: tfn(x, w, *b, **kw), arrays, 1e-5, 1e-5, seed)


def test_conv_same_even_kernel_pads_high_side():
    rng = np.random.default_rng(0)
    x, w = _randn(rng, 1, 1, 6, 5), _randn(rng, 1, 1, 4, 2)
    kw = dict(padding="same", dilation=(1, 3))
    _compare(lambda x, w: F.conv2d(x, w, **kw), lambda x, w: TF.conv2d(x, w, **kw), [x, w], 1e-5, 1e-5)


def test_conv_same_with_stride_raises_torch_message():
    x, w = jnp.ones((1, 1, 5)), jnp.ones((1, 1, 3))
    with pytest.raises(ValueError, match="padding='same' is not supported for strided convolutions"):
        F.conv1d(x, w, stride=2, padding="same")


@FEW
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.integers(0, 2**16))
def test_linear_matches_torch(lead, fin, fout, bias, seed):
    rng = np.random.default_rng(seed)
    arrays = [_randn(rng, lead, 3, fin), _randn(rng, fout, fin)] + ([_randn(rng, fout)] if bias else [])
    _compare(F.linear, TF.linear, arrays, 1e-5, 1e-5, seed)


# ----------------------------------------------------------------------------- pools


@st.composite
def pool_case(draw, dilated):
    nd = draw(st.sampled_from([1, 2, 3]))
    k = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) if dilated else 1 for _ in range(nd))
    s = draw(st.one_of(st.none(), st.tuples(*[st.integers(1, 3)] * nd)))
    # torch checks pad <= k // 2 on the undilated kernel (and <= half the dilated one).
    bound = [min(((ki - 1) * di + 1) // 2, ki // 2) for ki, di in zip(k, d)]
    p = tuple(draw(st.integers(0, b)) for b in bound)
    size = tuple(draw(st.integers(1, 7)) + di * (ki - 1) for ki, di in zip(k, d))
    return nd, k, s, p, d, size, draw(st.booleans()), draw(st.sampled_from([None, 2]))


MAX_POOL = {1: (F.max_pool1d, TF.max_pool1d), 2: (F.max_pool2d, TF.max_pool2d), 3: (F.max_pool3d, TF.max_pool3d)}
AVG_POOL = {1: (F.avg_pool1d, TF.avg_pool1d), 2: (F.avg_pool2d, TF.avg_pool2d), 3: (F.avg_pool3d, TF.avg_pool3d)}


@FEW
@given(pool_case(dilated=True), st.integers(0, 2**16))
def test_max_pool_matches_torch(case, seed):
    nd, k, s, p, d, size, ceil_mode, batch = case
    x = _randn(np.random.default_rng(seed), *(() if batch is None else (batch,)), 2, *size)
    jfn, tfn = MAX_POOL[nd]
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil_mode)
    _compare(lambda x: jfn(x, **kw), lambda x: tfn(x, **kw), [x], 0, 0, seed)


@FEW
@given(pool_case(dilated=False), st.booleans(), st.sampled_from([None, 3]), st.integers(0, 2**16))
def test_avg_pool_matches_torch(case, count_include_pad, divisor_override, seed):
    nd, k, s, p, _, size, ceil_mode, batch = case
    x = _randn(np.random.default_rng(seed), *(() if batch is None else (batch,)), 2, *size)
    jfn, tfn = AVG_POOL[nd]
    kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    if nd > 1:
        kw["divisor_override"] = divisor_override
    _compare(lambda x: jfn(x, **kw), lambda x: tfn(x, **kw), [x], 1e-6, 1e-6, seed)


def test_avg_pool_ceil_overhang_divisor():
    # Last window overhangs L + p: torch divides by the clipped window (k=3 -> 2).
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    _compare(lambda x: F.avg_pool1d(x, **kw), lambda x: TF.avg_pool1d(x, **kw), [x], 1e-6, 1e-6)


@pytest.mark.parametrize("fn, kw", [
    (F.max_pool2d, dict(kernel_size=3, padding=2)),
    (F.avg_pool2d, dict(kernel_size=3, padding=2)),
    (F.max_pool1d, dict(kernel_size=3, padding=2, dilation=2)),
])
def test_pool_padding_over_half_kernel_raises_torch_message(fn, kw):
    x = jnp.ones((1, 1, 8, 8) if fn is not F.max_pool1d else (1, 1, 8))
    tfn = getattr(TF, fn.__name__)
    with pytest.raises(RuntimeError) as torch_err:
        tfn(torch.ones(x.shape), **kw)
    with pytest.raises(ValueError) as ours:
        fn(x, **kw)
    assert str(ours.value) == str(torch_err.value)


ADAPTIVE = {
    "adaptive_avg_pool1d": 1, "adaptive_avg_pool2d": 2, "adaptive_avg_pool3d": 3, "adaptive_max_pool2d": 2,
}


@FEW
@given(st.sampled_from(sorted(ADAPTIVE)), st.data(), st.integers(0, 2**16))
def test_adaptive_pool_matches_torch(name, data, seed):
    nd = ADAPTIVE[name]
    size = tuple(data.draw(st.integers(1, 11)) for _ in range(nd))
    out = tuple(data.draw(st.one_of(st.integers(1, 11), st.none() if nd > 1 else st.integers(1, 2))) for _ in range(nd))
    batch = data.draw(st.sampled_from([None, 2]))
    x = _randn(np.random.default_rng(seed), *(() if batch is None else (batch,)), 2, *size)
    jfn, tfn = getattr(F, name), getattr(TF, name)
    # adaptive max: forward exact, but overlapping bins sum gradients in another order (~1e-7).
    _compare(lambda x: jfn(x, out), lambda x: tfn(x, out), [x], 1e-6, 1e-6, seed)


# ----------------------------------------------------------------------------- pad


@FEW
@given(st.sampled_from(["constant", "reflect", "replicate", "circular"]), st.integers(1, 3), st.data(),
       st.integers(0, 2**16))
def test_pad_matches_torch(mode, n_dims, data, seed):
    size = tuple(data.draw(st.integers(2, 5)) for _ in range(n_dims))
    lo = -1 if mode == "constant" else 0
    pads = []
    for L in reversed(size):
        top = L - 1 if mode == "reflect" else L
        pads += [data.draw(st.integers(lo, top)), data.draw(st.integers(lo, top))]
    kw = dict(mode=mode, value=1.5) if mode == "constant" else dict(mode=mode)
    x = _randn(np.random.default_rng(seed), 2, 2, *size)
    _compare(lambda x: F.pad(x, pads, **kw), lambda x: TF.pad(x, pads, **kw), [x], 1e-6, 1e-6, seed)


def test_max_pool_padding_checks_match_torch():
    # torch checks max-pool padding against the undilated kernel (2d/3d/1d each with its own message).
    import pytest

    cases = [
        (F.max_pool2d, TF.max_pool2d, (1, 2, 5, 9), dict(kernel_size=(1, 3), padding=(0, 2), dilation=(1, 2))),
        (F.max_pool3d, TF.max_pool3d, (1, 2, 5, 5, 9), dict(kernel_size=(1, 1, 3), padding=(0, 0, 2), dilation=(1, 1, 2))),
        (F.max_pool1d, TF.max_pool1d, (1, 2, 9), dict(kernel_size=3, padding=2, dilation=2)),
        (F.avg_pool2d, TF.avg_pool2d, (1, 2, 5, 9), dict(kernel_size=(1, 3), padding=(0, 2))),
    ]
    for ours, theirs, shape, kw in cases:
        with pytest.raises(RuntimeError) as torch_error:
            theirs(torch.ones(shape), **kw)
        with pytest.raises(ValueError) as our_error:
            ours(np.ones(shape, np.float32), **kw)
        assert str(our_error.value) == str(torch_error.value)


# The default tier checks 2-D's first 10 seeded draws; the slow tier 2-D's draws 10 to 19 of the
# same sequence (the first 10 are the default tier's, drawn again but not rechecked) and all 20 in
# 1-D and 3-D (each draw compiles its own shape: about 0.6 s).
@pytest.mark.parametrize(("nd", "first", "draws"),
                         [(2, 0, 10)] + [pytest.param(nd, first, 20, marks=pytest.mark.slow)
                                         for nd, first in ((1, 0), (2, 10), (3, 0))])
def test_max_pool_return_indices_match_torch(nd, first, draws):
    """Values and indices bit-identical to torch, with ties, NaN and -inf windows.

    torch keeps the first maximum, the last NaN, and for an all -inf window the
    first in-bounds element (see jax_impl/nn/_pool_indices.py). Draws ``first`` to
    ``draws - 1`` of the seeded sequence are checked.
    """
    rng = np.random.default_rng(nd)
    checked = 0
    for i in range(draws):
        k, s, d = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        p, ceil = int(rng.integers(0, k // 2 + 1)), bool(rng.integers(0, 2))
        shape = (2, 2) + tuple(int(rng.integers(k * d, 8)) for _ in range(nd))
        x = rng.integers(-3, 3, size=shape).astype(np.float32)
        x[rng.random(shape) < 0.05] = np.nan
        x[rng.random(shape) < 0.1] = -np.inf
        try:
            tv, ti = getattr(TF, f"max_pool{nd}d")(torch.tensor(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
        except RuntimeError:
            continue
        if i < first:
            tuple(int(rng.integers(1, 6)) for _ in range(nd))  # the adaptive pool's output size, drawn as below
            continue
        out = tuple(int(rng.integers(1, 6)) for _ in range(nd))

        def both_pools(x):
            return (getattr(F, f"max_pool{nd}d")(x, k, s, p, d, ceil_mode=ceil, return_indices=True),
                    getattr(F, f"adaptive_max_pool{nd}d")(x, out, return_indices=True))

        # jit: one compilation per shape, both pools in it, instead of one per eager op (the gather path has dozens).
        (jv, ji), (jav, jai) = jax.jit(both_pools)(x)
        np.testing.assert_array_equal(np.asarray(jv), tv.numpy())
        np.testing.assert_array_equal(np.asarray(ji), ti.numpy())
        tv, ti = getattr(TF, f"adaptive_max_pool{nd}d")(torch.tensor(x), out, return_indices=True)
        np.testing.assert_array_equal(np.asarray(jav), tv.numpy())
        np.testing.assert_array_equal(np.asarray(jai), ti.numpy())
        checked += 1
    assert checked >= (draws - first) // 2


def test_max_pool_propagates_nan_like_torch():
    """A window holding NaN yields NaN, eager and jitted (regression: the dilated
    3-D path once reduced a 6-D stack whose XLA:CPU max dropped NaN)."""
    rng = np.random.default_rng(7)
    for nd, k, s, d in [(3, 2, 1, 2), (3, 3, 2, 2), (2, 3, 1, 2), (1, 3, 2, 1), (2, 2, 2, 1)]:
        x = rng.standard_normal((2, 3) + (7,) * nd).astype(np.float32)
        x[rng.random(x.shape) < 0.05] = np.nan
        want = getattr(TF, f"max_pool{nd}d")(torch.tensor(x), k, s, 0, d).numpy()
        fn = getattr(F, f"max_pool{nd}d")
        for got in (fn(x, k, s, 0, d), jax.jit(lambda x: fn(x, k, s, 0, d))(x)):
            np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("seed", slow_after(range(6), 2))
def test_normalize_matches_torch(seed):
    """``F.normalize`` over a seeded grid of ``p``, ``dim`` and ``eps``, slices of zeros and of tiny norms
    included: float64 values and input gradients within 1e-12 (measured 2.2e-16 relative; 9.1e-13 absolute
    at the maximum of a ``p=inf`` slice, where torch's gradient is the rounding residue of an exact 0),
    torch's zero gradient through a norm clamped at ``eps``."""
    rng = np.random.default_rng(seed)
    p = [2.0, 1.0, 3.0, float("inf"), 0.5][seed % 5]
    shape = tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    dim = int(rng.integers(-len(shape), len(shape)))
    eps = [1e-12, 1e-3, 0.5][seed % 3]
    x = rng.standard_normal(shape)
    x[(slice(None),) * (dim % len(shape)) + (0,)] *= [0.0, 1e-4][seed % 2]  # a slice of zeros / tiny values
    cot = rng.standard_normal(shape)
    t = torch.tensor(x, requires_grad=True)
    (TF.normalize(t, p=p, dim=dim, eps=eps) * torch.tensor(cot)).sum().backward()
    with jax.enable_x64(True):
        ours = F.normalize(jnp.asarray(x), p=p, dim=dim, eps=eps)
        grad = jax.grad(lambda v: (F.normalize(v, p=p, dim=dim, eps=eps) * cot).sum())(jnp.asarray(x))
    theirs = TF.normalize(torch.tensor(x), p=p, dim=dim, eps=eps).numpy()
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(grad), t.grad.numpy(), rtol=1e-12, atol=1e-12)
