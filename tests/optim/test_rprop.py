"""``jax_impl.optim.rprop`` against ``torch.optim.Rprop`` (``prev`` and ``step_size`` state included)."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def rprop_kwargs(draw):
    return {
        "lr": draw(H.log_uniform(1e-4, 0.5)),
        "etas": draw(st.just((0.5, 1.2)) | st.tuples(st.floats(0.05, 0.95), st.floats(1.01, 3.0))),
        "step_sizes": draw(st.just((1e-6, 50)) | st.tuples(H.log_uniform(1e-8, 1e-3), H.log_uniform(1e-2, 100.0))),
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(4)
@given(kwargs=rprop_kwargs(), problem=H.problems())
def test_rprop_matches_torch(dtype, kwargs, problem, parity_record):
    # Problems include exact-zero gradients (sign(g * prev) == 0, torch's third branch).
    H.check_trajectory("rprop", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_rprop_1000_steps(parity_record):
    H.check_long_trajectory("rprop", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-0.01), dict(etas=(1.0, 1.2)), dict(etas=(0.0, 1.2)), dict(etas=(0.5, 1.0)), dict(etas=(0.5, 0.9)), dict(lr=float("nan")), dict(etas=(float("nan"), 1.2))],
)
def test_rprop_validation(kwargs):
    H.assert_same_validation("rprop", kwargs)


def _step_both(init, grads, kwargs, *, check_every_step=False):
    """Runs torch's Rprop and ours over ``grads`` from ``init``; asserts params (each step if
    asked, else at the end) and the final ``step_size`` and ``prev`` state."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    from jax_impl import optim
    from parity import assert_parity

    p = torch.nn.Parameter(torch.tensor(init))
    torch_opt = torch.optim.Rprop([p], **kwargs)
    tx = optim.rprop(**kwargs)
    params = jnp.asarray(init)
    state = tx.init(params)
    for g in grads:
        p.grad = torch.tensor(g)
        torch_opt.step()
        params, state = tx.step(jnp.asarray(g, jnp.float32), state, params)
        if check_every_step:
            assert_parity(p.detach(), np.asarray(params))
    assert_parity(p.detach(), np.asarray(params))
    assert_parity(torch_opt.state[p]["step_size"], state.step_size)
    assert_parity(torch_opt.state[p]["prev"], state.prev)


def test_rprop_nan_and_signed_zero_gradients_follow_torch():
    # torch.sign(NaN) == 0 and torch.sign(-0.0) == +0: a NaN gradient neither moves the
    # parameter nor changes its step size, and is remembered as the previous gradient.
    grads = [[float("nan"), 1.0, -0.0], [1.0, 1.0, 2.0], [-1.0, float("nan"), 1.0], [1.0, 1.0, 1.0]]
    _step_both([1.0, 2.0, 3.0], grads, dict(lr=0.1))


def test_rprop_infinite_step_size_follows_torch():
    # torch moves p by sign(g') * step_size with g' the zeroed gradient: a flipped or zero
    # gradient gives 0 * inf = NaN there, which a "keep p where flipped" shortcut would miss.
    grads = [[1.0, -1.0, 0.0, 1.0], [-1.0, -1.0, 1.0, -2.0], [1.0, 2.0, -1.0, 1.0]]
    kwargs = dict(lr=float("inf"), step_sizes=(1e-6, float("inf")))
    _step_both([1.0, 2.0, 3.0, -0.0], grads, kwargs, check_every_step=True)
