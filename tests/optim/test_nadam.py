"""``jax_impl.optim.nadam`` against ``torch.optim.NAdam`` (``mu_product`` state included)."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


def nadam_kwargs():
    return H.adam_family_kwargs(
        momentum_decay=st.just(4e-3) | H.log_uniform(1e-4, 0.1),
        decoupled_weight_decay=st.booleans(),
    )


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=nadam_kwargs(), problem=H.problems())
def test_nadam_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("nadam", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_nadam_1000_steps(parity_record):
    H.check_long_trajectory("nadam", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-1e-3), dict(eps=-1e-8), dict(betas=(1.0, 0.999)), dict(betas=(0.9, 1.0)), dict(weight_decay=-1.0), dict(momentum_decay=-4e-3), dict(momentum_decay=float("nan"))],
)
def test_nadam_validation(kwargs):
    H.assert_same_validation("nadam", kwargs)
