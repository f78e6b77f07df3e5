"""``jax_impl.optim.sgd`` against ``torch.optim.SGD``."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


@st.composite
def sgd_kwargs(draw):
    momentum = draw(H.zero_or(st.sampled_from([0.5, 0.9, 0.99]) | st.floats(0.01, 0.999)))
    nesterov = momentum > 0 and draw(st.booleans())
    return {
        "lr": draw(H.log_uniform(1e-4, 0.5)),
        "momentum": momentum,
        "dampening": 0.0 if nesterov else draw(H.zero_or(st.floats(0.0, 1.0))),
        "weight_decay": draw(H.zero_or(H.log_uniform(1e-5, 0.1))),
        "nesterov": nesterov,
        "maximize": draw(st.booleans()),
    }


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(4)
@given(kwargs=sgd_kwargs(), problem=H.problems())
def test_sgd_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("sgd", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_sgd_1000_steps(parity_record):
    H.check_long_trajectory("sgd", parity_record)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=-0.1),
        dict(momentum=-0.5),
        dict(weight_decay=-1e-3),
        dict(nesterov=True),  # momentum 0
        dict(nesterov=True, momentum=0.9, dampening=0.1),
        dict(lr=float("nan")),  # torch checks `lr < 0.0`, which NaN passes
        dict(momentum=float("nan")),
        dict(weight_decay=float("nan")),
    ],
)
def test_sgd_validation(kwargs):
    H.assert_same_validation("sgd", kwargs)
