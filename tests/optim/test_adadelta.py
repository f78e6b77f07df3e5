"""``jax_impl.optim.adadelta`` against ``torch.optim.Adadelta``."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def adadelta_kwargs(draw):
    return {
        "lr": draw(st.just(1.0) | st.floats(0.05, 2.0)),
        "rho": draw(st.sampled_from([0.0, 0.9, 1.0]) | st.floats(0.0, 1.0)),
        "eps": draw(st.just(1e-6) | H.log_uniform(1e-9, 1e-3)),
        "weight_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=adadelta_kwargs(), problem=H.problems())
def test_adadelta_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("adadelta", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_adadelta_1000_steps(parity_record):
    H.check_long_trajectory("adadelta", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-1.0), dict(rho=-0.1), dict(rho=1.5), dict(eps=-1e-6), dict(weight_decay=-0.1), dict(rho=float("nan"))],
)
def test_adadelta_validation(kwargs):
    H.assert_same_validation("adadelta", kwargs)
