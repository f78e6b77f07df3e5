"""``jax_impl.optim.rmsprop`` against ``torch.optim.RMSprop``."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def rmsprop_kwargs(draw):
    return {
        "lr": draw(H.log_uniform(1e-4, 0.1)),
        "alpha": draw(st.just(0.99) | st.floats(0.5, 0.999)),
        "eps": draw(H.log_uniform(1e-10, 1e-3)),
        "weight_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "momentum": draw(H.zero_or(st.floats(0.05, 0.95))),
        "centered": draw(st.booleans()),
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=rmsprop_kwargs(), problem=H.problems())
def test_rmsprop_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("rmsprop", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_rmsprop_1000_steps(parity_record):
    H.check_long_trajectory("rmsprop", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-1e-3), dict(eps=-1e-8), dict(momentum=-0.1), dict(weight_decay=-0.1), dict(alpha=-0.5), dict(lr=float("nan")), dict(alpha=float("nan"))],
)
def test_rmsprop_validation(kwargs):
    H.assert_same_validation("rmsprop", kwargs)
