"""``jax_impl.optim.adagrad`` against ``torch.optim.Adagrad``."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def adagrad_kwargs(draw):
    return {
        "lr": draw(H.log_uniform(1e-4, 0.5)),
        "lr_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "weight_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "initial_accumulator_value": draw(H.zero_or(st.floats(1e-3, 2.0))),
        "eps": draw(st.just(1e-10) | H.log_uniform(1e-12, 1e-4)),
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=adagrad_kwargs(), problem=H.problems())
def test_adagrad_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("adagrad", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_adagrad_1000_steps(parity_record):
    H.check_long_trajectory("adagrad", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-0.01), dict(lr_decay=-1e-3), dict(weight_decay=-1e-3), dict(initial_accumulator_value=-0.1), dict(eps=-1e-10), dict(lr=float("nan"))],
)
def test_adagrad_validation(kwargs):
    H.assert_same_validation("adagrad", kwargs)
