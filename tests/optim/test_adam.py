"""``jax_impl.optim.adam`` / ``adamw`` against ``torch.optim.Adam`` / ``AdamW``."""

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.optim import _harness as H


def adam_kwargs(decoupled_flag=True):
    extra = {"decoupled_weight_decay": st.booleans()} if decoupled_flag else {}  # AdamW fixes it to True
    return H.adam_family_kwargs(amsgrad=st.booleans(), **extra)


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=adam_kwargs(), problem=H.problems())
def test_adam_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("adam", kwargs, problem, dtype, parity_record)


@pytest.mark.parametrize("dtype", H.DTYPES)
@H.examples(2)
@given(kwargs=adam_kwargs(decoupled_flag=False), problem=H.problems())
def test_adamw_matches_torch(dtype, kwargs, problem, parity_record):
    H.check_trajectory("adamw", kwargs, problem, dtype, parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_adam_1000_steps(parity_record):
    H.check_long_trajectory("adam", parity_record)


@pytest.mark.slow  # ~2-3 s: a compile plus 1000 steps on each side
def test_adamw_1000_steps(parity_record):
    H.check_long_trajectory("adamw", parity_record)


INVALID = [
    dict(lr=-1e-3),
    dict(eps=-1e-8),
    dict(betas=(1.0, 0.999)),
    dict(betas=(-0.1, 0.999)),
    dict(betas=(0.9, 1.0)),
    dict(betas=(0.9, -1e-3)),
    dict(weight_decay=-1e-2),
    dict(lr=float("nan")),
    dict(betas=(0.9, float("nan"))),
]


@pytest.mark.parametrize("name", ["adam", "adamw"])
@pytest.mark.parametrize("kwargs", INVALID)
def test_adam_validation(name, kwargs):
    H.assert_same_validation(name, kwargs)


@pytest.mark.parametrize("name", ["adam", "adamw"])
@pytest.mark.parametrize("tensor_index", [0, 1])
def test_adam_mixed_float_and_tensor_betas_raise_like_torch(name, tensor_index):
    import jax.numpy as jnp
    import torch

    import jax_impl.optim

    def betas(make):
        pair = [0.9, 0.99]
        pair[tensor_index] = make(pair[tensor_index])
        return tuple(pair)

    torch_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    with pytest.raises(ValueError) as theirs:
        torch_cls([torch.zeros(1, requires_grad=True)], betas=betas(torch.tensor))
    with pytest.raises(ValueError) as mine:
        getattr(jax_impl.optim, name)(betas=betas(jnp.asarray))
    assert str(mine.value) == str(theirs.value)
