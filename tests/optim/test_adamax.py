"""``jax_impl.optim.adamax`` against ``torch.optim.Adamax``."""

import pytest
from hypothesis import given

from tests.optim import _harness as H


def adamax_kwargs():
    return H.adam_family_kwargs()


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(4)
@given(kwargs=adamax_kwargs(), problem=H.problems())
def test_adamax_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("adamax", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_adamax_1000_steps(parity_record):
    H.check_long_trajectory("adamax", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [dict(lr=-1e-3), dict(eps=-1e-8), dict(betas=(1.0, 0.999)), dict(betas=(0.9, 1.5)), dict(weight_decay=-1.0), dict(lr=float("nan"))],
)
def test_adamax_validation(kwargs):
    H.assert_same_validation("adamax", kwargs)
