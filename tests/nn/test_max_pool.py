"""Max-pool gradients routed as torch routes them (``jax_impl/nn/_max_pool.py``), bit for bit.

Inputs drawn from a few small integers make ties the rule rather than the
exception; NaN and ``-inf`` windows, padding, ceil mode, dilation and
overlapping windows (where an element collects several gradients, summed in
torch's order) are all drawn. Forward mode is compared with torch's forward AD.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_impl.nn import functional as F
from tests._tiers import slow_except


@st.composite
def pool_case(draw):
    nd = draw(st.sampled_from([1, 2, 2, 3]))
    k = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.sampled_from([1, 1, 2])) for _ in range(nd))
    # stride == kernel half the time: windows that tile the input take their own gradient path.
    s = k if draw(st.booleans()) else tuple(draw(st.integers(1, 3)) for _ in range(nd))
    p = tuple(draw(st.integers(0, min(((ki - 1) * di + 1) // 2, ki // 2))) for ki, di in zip(k, d))
    size = tuple(draw(st.integers(1, 6)) + di * (ki - 1) for ki, di in zip(k, d))
    return nd, k, s, p, d, size, draw(st.booleans()), draw(st.integers(0, 2**16))


def _input(nd, size, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (2, 3) + size).astype(np.float32)  # ties everywhere
    special = rng.random(x.shape)
    x[special < 0.05] = np.nan
    x[(special >= 0.05) & (special < 0.15)] = -np.inf
    if x.size > 3:
        x.reshape(-1)[: size[-1]] = -np.inf  # a row of -inf: some windows hold nothing else
    return x


# The default tier's share of the draws; the slow tier's sibling test runs all 60.
@settings(max_examples=15, deadline=None)
@given(pool_case())
def test_max_pool_gradient_matches_torch_with_ties_nan_and_inf(case):
    nd, k, s, p, d, size, ceil_mode, seed = case
    x = _input(nd, size, seed)
    kw = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil_mode)
    tx = torch.tensor(x, requires_grad=True)
    ty = getattr(TF, f"max_pool{nd}d")(tx, **kw)
    # Gradients with negative zeros and a shared value: the summation order and signs show.
    g = np.random.default_rng(seed + 1).integers(-3, 4, tuple(ty.shape)).astype(np.float32) * 0.1
    g[g == 0] = -0.0
    ty.backward(torch.tensor(g))
    fn = getattr(F, f"max_pool{nd}d")
    # Traced as in a train step: the "+ 0" that turns a lone -0 gradient into torch's +0 rests
    # on a value XLA cannot fold, which an eager jax.vjp would have made a constant.
    y, gx = jax.jit(lambda a, ct: (fn(a, **kw), jax.vjp(lambda b: fn(b, **kw), a)[1](ct)[0]))(jnp.asarray(x), jnp.asarray(g))
    np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy())
    want = tx.grad.numpy()
    np.testing.assert_array_equal(np.asarray(gx), want)
    np.testing.assert_array_equal(np.signbit(np.asarray(gx)), np.signbit(want))  # -0 vs +0 too


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(pool_case())
def test_max_pool_gradient_matches_torch_with_ties_nan_and_inf_all_draws(case):
    test_max_pool_gradient_matches_torch_with_ties_nan_and_inf.hypothesis.inner_test(case)


# The 2-d cases in the default tier, 1-d and 3-d (the same code over other dims) in the slow tier.
@pytest.mark.parametrize("nd, k, s, p", slow_except([(2, 3, 2, 1), (2, 2, 2, 0), (1, 3, 1, 1), (3, 2, 1, 1)],
                                                    lambda case: case[0] == 2, several=True))
def test_max_pool_forward_mode_matches_torch(nd, k, s, p):
    rng = np.random.default_rng(nd * 10 + k)
    size = (7,) * nd
    x = rng.integers(-2, 3, (2, 3) + size).astype(np.float32)
    t = rng.standard_normal(x.shape).astype(np.float32)
    fn_t = getattr(TF, f"max_pool{nd}d")
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        out = fn_t(fwAD.make_dual(torch.tensor(x), torch.tensor(t)), k, s, p)
        want_y, want_t = fwAD.unpack_dual(out)
    fn = getattr(F, f"max_pool{nd}d")
    y, ty = jax.jvp(lambda a: fn(a, k, s, p), (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_array_equal(np.asarray(y), want_y.numpy())
    np.testing.assert_array_equal(np.asarray(ty), want_t.numpy())


def test_max_pool_gradient_is_elementwise():
    # No index-carrying reduce-window, no scatter (XLA:CPU's slow path) in the compiled gradient.
    import re

    def loss(x):
        return jnp.sum(F.max_pool2d(x, 3, 2, 1) ** 2)

    hlo = jax.jit(jax.grad(loss)).lower(jnp.ones((2, 3, 9, 9))).compile().as_text()
    ops = set(re.findall(r"= [^ ]+ ([a-z-]+)\(", hlo))
    assert not ops & {"scatter", "reduce-window", "select-and-scatter"}, ops
