"""``jax_impl.optim.asgd`` against ``torch.optim.ASGD`` (``eta``, ``mu`` and ``ax`` state included)."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def asgd_kwargs(draw):
    return {
        "lr": draw(H.log_uniform(1e-4, 0.1)),
        "lambd": draw(st.just(1e-4) | H.log_uniform(1e-6, 0.1)),
        "alpha": draw(st.just(0.75) | st.floats(0.1, 1.5)),
        # t0 below the 200 steps switches averaging on mid-trajectory (mu < 1).
        "t0": draw(st.sampled_from([1e6, 0.0, 50.0]) | st.floats(0.0, 300.0)),
        "weight_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(4)
@given(kwargs=asgd_kwargs(), problem=H.problems())
def test_asgd_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("asgd", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_asgd_1000_steps(parity_record):
    H.check_long_trajectory("asgd", parity_record)


@pytest.mark.parametrize("kwargs", [dict(lr=-0.01), dict(weight_decay=-1e-3), dict(lr=float("nan"))])
def test_asgd_validation(kwargs):
    H.assert_same_validation("asgd", kwargs)
