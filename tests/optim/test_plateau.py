"""jax_impl.optim.plateau against torch.optim.lr_scheduler.ReduceLROnPlateau."""

import itertools
import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from jax_impl import optim
from jax_impl.optim.plateau import (
    ReduceLROnPlateau,
    reduce_lr_on_plateau_init,
    reduce_lr_on_plateau_step,
)
from parity import assert_parity, strict_numerics

T = torch.optim.lr_scheduler
EPOCHS = 200


def torch_groups(lrs):
    """A torch SGD with one param group per lr."""
    return torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs],
        lr=lrs[0],
    )


@st.composite
def metric_sequences(draw):
    """Random walks with plateaus (repeated values) and occasional jumps, NaN-free."""
    value = draw(st.floats(-10.0, 10.0))
    scale = draw(st.sampled_from([1e-6, 1e-3, 1.0, 100.0]))
    moves = st.one_of(
        st.just(0.0), st.floats(-1.0, 1.0), st.sampled_from([-1e-4, 1e-4, 5.0, -5.0])
    )
    out = []
    for move in draw(st.lists(moves, min_size=EPOCHS, max_size=EPOCHS)):
        value += move * scale
        out.append(value)
    return out


settings_kwargs = {"max_examples": 30, "deadline": None, "derandomize": True}


@pytest.mark.parametrize(
    "mode,threshold_mode", list(itertools.product(["min", "max"], ["rel", "abs"]))
)
@settings(**settings_kwargs)
@given(
    metrics=metric_sequences(),
    lrs=st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=2),
    factor=st.one_of(st.floats(0.0, 0.99), st.sampled_from([0.1, 0.5, 0.9])),
    patience=st.integers(0, 8),
    cooldown=st.integers(0, 5),
    min_lr=st.lists(
        st.one_of(st.just(0), st.floats(0.0, 0.05)), min_size=2, max_size=2
    ),
    eps=st.sampled_from([0.0, 1e-8, 1e-4, 1e-2]),
    threshold=st.sampled_from([0.0, 1e-4, 1e-2, 0.1]),
)
def test_lr_sequence_matches_torch(
    mode,
    threshold_mode,
    metrics,
    lrs,
    factor,
    patience,
    cooldown,
    min_lr,
    eps,
    threshold,
):
    kwargs = {
        "mode": mode,
        "factor": factor,
        "patience": patience,
        "threshold": threshold,
        "threshold_mode": threshold_mode,
        "cooldown": cooldown,
        "min_lr": min_lr,
        "eps": eps,
    }
    opt = torch_groups(lrs)
    sched = T.ReduceLROnPlateau(opt, **kwargs)
    state = reduce_lr_on_plateau_init(lrs, **kwargs)
    driver = ReduceLROnPlateau(lrs, **kwargs)
    for metric in metrics:
        sched.step(metric)
        state = reduce_lr_on_plateau_step(state, metric, **kwargs)
        driver.step(metric)
        expected = [g["lr"] for g in opt.param_groups]
        assert list(state.lrs) == expected
        assert driver.get_last_lr() == expected
        assert [driver.group(i)(0) for i in range(2)] == expected
        assert (
            state.best,
            state.num_bad_epochs,
            state.cooldown_counter,
            state.last_epoch,
        ) == (
            sched.best,
            sched.num_bad_epochs,
            sched.cooldown_counter,
            sched.last_epoch,
        )
    assert driver.state_dict() == sched.state_dict()


def test_reductions_happen_as_torch_counts_patience():
    """``bad > patience``: the (patience + 1)-th bad epoch reduces; cooldown then blocks."""
    kwargs = {"patience": 2, "cooldown": 1, "factor": 0.5}
    opt = torch_groups([1.0])
    sched = T.ReduceLROnPlateau(opt, **kwargs)
    driver = ReduceLROnPlateau(1.0, **kwargs)
    seen = []
    for _ in range(10):
        sched.step(1.0)
        driver.step(1.0)
        assert driver(123) == opt.param_groups[0]["lr"]
        seen.append(driver(0))
    assert seen == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]


INVALID = [
    {"factor": 1.0},
    {"factor": 2.5, "mode": "bad"},
    {"min_lr": [0.0, 0.1, 0.2]},
    {"mode": "avg"},
    {"threshold_mode": "percent"},
    {"mode": "max", "threshold_mode": "nope"},
]


@pytest.mark.parametrize("kwargs", INVALID)
def test_validation_messages_match_torch(kwargs):
    with pytest.raises(ValueError) as torch_error:
        T.ReduceLROnPlateau(torch_groups([0.1, 0.2]), **kwargs)
    with pytest.raises(ValueError) as init_error:
        reduce_lr_on_plateau_init([0.1, 0.2], **kwargs)
    with pytest.raises(ValueError) as driver_error:
        ReduceLROnPlateau([0.1, 0.2], **kwargs)
    assert str(init_error.value) == str(driver_error.value) == str(torch_error.value)


def test_state_dict_round_trip_with_torch():
    kwargs = {
        "mode": "max",
        "patience": 1,
        "cooldown": 2,
        "min_lr": 1e-3,
        "threshold_mode": "abs",
        "threshold": 0.1,
    }
    opt = torch_groups([0.3, 0.05])
    sched = T.ReduceLROnPlateau(opt, **kwargs)
    driver = ReduceLROnPlateau([0.3, 0.05], **kwargs)
    assert driver.state_dict() == sched.state_dict()
    assert list(driver.state_dict()) == list(sched.state_dict())
    metrics = [0.0, 0.05, 0.3, 0.3, 0.3, 0.3, 0.31, 0.5, 0.5, 0.5, 0.5, 0.5]
    for m in metrics[:6]:
        sched.step(m)
        driver.step(m)
    assert driver.state_dict() == sched.state_dict()
    # Resume each from the other's state dict; both must keep matching torch.
    resumed = ReduceLROnPlateau(1.0)
    resumed.load_state_dict(sched.state_dict())
    torch_resumed = T.ReduceLROnPlateau(torch_groups(driver.get_last_lr()))
    torch_resumed.load_state_dict(driver.state_dict())
    for m in metrics[6:]:
        sched.step(m)
        resumed.step(m)
        torch_resumed.step(m)
        assert resumed.get_last_lr() == [g["lr"] for g in opt.param_groups]
        assert torch_resumed.get_last_lr() == resumed.get_last_lr()
    assert resumed.state_dict() == sched.state_dict() == torch_resumed.state_dict()


def test_state_is_pure():
    state = reduce_lr_on_plateau_init(0.1, patience=0)
    after = reduce_lr_on_plateau_step(
        reduce_lr_on_plateau_step(state, 1.0, patience=0), 1.0, patience=0
    )
    assert state == ((0.1,), math.inf, 0, 0, 0)
    assert after.lrs[0] == 0.1 * 0.1 and after.last_epoch == 2


def _metric(w):
    # A plateau-prone function of the params: the loss rounded to 0.1.
    return float(np.round(np.sum(np.asarray(w, np.float64) ** 2), 1))


def test_sgd_end_to_end_under_jit():
    epochs, steps = 30, 5
    kwargs = {"patience": 1, "factor": 0.5, "threshold": 0.01, "cooldown": 1}
    rng = np.random.default_rng(0)
    params = rng.standard_normal((5, 3)).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(params.copy()))
    opt = torch.optim.SGD([p], lr=0.05, momentum=0.9)
    sched = T.ReduceLROnPlateau(opt, **kwargs)
    plateau = ReduceLROnPlateau(0.05, **kwargs)
    with strict_numerics():
        tx = optim.sgd(lr=plateau, momentum=0.9)
    w = jnp.asarray(params)
    state = tx.init(w)
    step = jax.jit(tx.step)
    lrs = []
    for _ in range(epochs):
        for _ in range(steps):
            grad = (rng.standard_normal(params.shape) + params).astype(np.float32)
            p.grad = torch.from_numpy(grad)
            opt.step()
            w, state = step(jnp.asarray(grad), state, w)
        sched.step(_metric(p.detach().numpy()))
        plateau.step(_metric(w))
        assert plateau(0) == opt.param_groups[0]["lr"]
        lrs.append(plateau(0))
    assert len(set(lrs)) >= 3  # the lr really was reduced, more than once
    assert_parity({"w": p.detach()}, {"w": w})
    np.testing.assert_array_equal(np.asarray(w), p.detach().numpy())


def test_two_groups_end_to_end_under_jit():
    """``plateau.group(i)`` as each jax_impl param group's lr, against torch's two groups."""
    kwargs = {
        "patience": 0,
        "factor": 0.3,
        "min_lr": [1e-3, 0.0],
        "threshold_mode": "abs",
        "threshold": 0.05,
    }
    rng = np.random.default_rng(1)
    params = {
        "a": rng.standard_normal(4).astype(np.float32),
        "b": rng.standard_normal(3).astype(np.float32),
    }
    tp = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    opt = torch.optim.SGD(
        [{"params": [tp["a"]], "lr": 0.1}, {"params": [tp["b"]], "lr": 0.02}], lr=0.1
    )
    sched = T.ReduceLROnPlateau(opt, **kwargs)
    plateau = ReduceLROnPlateau([0.1, 0.02], **kwargs)
    with strict_numerics():
        tx = optim.param_groups(
            optim.sgd,
            [
                {"params": "a", "lr": plateau.group(0)},
                {"params": "b", "lr": plateau.group(1)},
            ],
        )
    w = {k: jnp.asarray(v) for k, v in params.items()}
    state = tx.init(w)
    step = jax.jit(tx.step)
    for _ in range(20):
        for _ in range(3):
            grads = {
                k: rng.standard_normal(v.shape).astype(np.float32)
                for k, v in params.items()
            }
            for k, g in grads.items():
                tp[k].grad = torch.from_numpy(g)
            opt.step()
            w, state = step({k: jnp.asarray(g) for k, g in grads.items()}, state, w)
        sched.step(
            _metric(
                np.concatenate([tp["a"].detach().numpy(), tp["b"].detach().numpy()])
            )
        )
        plateau.step(_metric(np.concatenate([np.asarray(w["a"]), np.asarray(w["b"])])))
        assert plateau.get_last_lr() == [g["lr"] for g in opt.param_groups]
    assert plateau.get_last_lr() != [0.1, 0.02]
    assert_parity({k: v.detach() for k, v in tp.items()}, w)
