"""``jax_impl.optim.radam`` against ``torch.optim.RAdam`` (rectified and unrectified steps)."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


def radam_kwargs():
    # betas() draws beta2 down to 0.5; below 2/3 rho_inf <= 5 and torch never rectifies: both branches drawn.
    return H.adam_family_kwargs(decoupled_weight_decay=st.booleans())


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=radam_kwargs(), problem=H.problems())
def test_radam_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("radam", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_radam_1000_steps(parity_record):
    H.check_long_trajectory("radam", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-1e-3), dict(eps=-1e-8), dict(betas=(1.0, 0.999)), dict(betas=(0.9, 1.0)), dict(weight_decay=-1.0), dict(eps=float("nan"))],
)
def test_radam_validation(kwargs):
    H.assert_same_validation("radam", kwargs)
