"""``jax_impl.optim.lr_scheduler`` against ``torch.optim.lr_scheduler``: the same Python floats, step for step."""

import warnings

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from jax_impl import optim
from jax_impl.optim import lr_scheduler as S
from parity import assert_parity, strict_numerics
from parity.numerics import sqrt_tolerances

STEPS = 1000
T = torch.optim.lr_scheduler

base_lrs = st.floats(1e-4, 1.0)
factors = st.floats(0.01, 1.0)
gammas = st.floats(0.5, 1.0)
small_ints = st.integers(1, 60)
etas = st.sampled_from([0.0, 1e-5, 1e-3])

# name -> (torch class, strategy of kwargs shared by both sides)
CASES = {
    "lambda_lr": (T.LambdaLR, st.floats(0.99, 1.0).map(lambda a: {"lr_lambda": lambda e: a**e / (1 + e % 7)})),
    "multiplicative_lr": (T.MultiplicativeLR, st.floats(0.99, 1.0).map(lambda a: {"lr_lambda": lambda e: a + 1e-4 * (e % 3)})),
    "step_lr": (T.StepLR, st.fixed_dictionaries({"step_size": small_ints, "gamma": gammas})),
    "multi_step_lr": (
        T.MultiStepLR,
        st.fixed_dictionaries({"milestones": st.lists(st.integers(0, STEPS), max_size=8), "gamma": gammas}),
    ),
    "constant_lr": (T.ConstantLR, st.fixed_dictionaries({"factor": factors, "total_iters": st.integers(0, 60)})),
    "linear_lr": (
        T.LinearLR,
        st.fixed_dictionaries(
            {"start_factor": factors, "end_factor": st.floats(0.0, 1.0), "total_iters": st.integers(1, 200)}
        ),
    ),
    "exponential_lr": (T.ExponentialLR, st.fixed_dictionaries({"gamma": st.floats(0.99, 1.0)})),
    "polynomial_lr": (
        T.PolynomialLR, st.fixed_dictionaries({"total_iters": st.integers(1, 300), "power": st.floats(0.5, 3.0)})
    ),
    "cosine_annealing_lr": (  # T_max < STEPS: past T_max the lr rises again (period 2*T_max)
        T.CosineAnnealingLR, st.fixed_dictionaries({"T_max": st.integers(1, 400), "eta_min": etas})
    ),
    "cosine_annealing_warm_restarts": (
        T.CosineAnnealingWarmRestarts,
        st.fixed_dictionaries({"T_0": small_ints, "T_mult": st.integers(1, 3), "eta_min": etas}),
    ),
    "cyclic_lr": (
        T.CyclicLR,
        st.fixed_dictionaries(
            {
                "base_lr": st.floats(1e-4, 1e-2),
                "max_lr": st.floats(1e-2, 1.0),
                "step_size_up": st.integers(1, 200),
                "step_size_down": st.none() | st.integers(1, 200),
                "mode": st.sampled_from(["triangular", "triangular2", "exp_range"]),
                "gamma": st.floats(0.99, 1.0),
                "cycle_momentum": st.booleans(),
                "base_momentum": st.floats(0.5, 0.85),
                "max_momentum": st.floats(0.85, 0.99),
            }
        ),
    ),
    "one_cycle_lr": (
        T.OneCycleLR,
        st.fixed_dictionaries(
            {
                "max_lr": st.floats(1e-3, 1.0),
                "total_steps": st.integers(STEPS, STEPS + 200),
                "pct_start": st.floats(0.05, 0.45),
                "anneal_strategy": st.sampled_from(["cos", "linear"]),
                "cycle_momentum": st.booleans(),
                "div_factor": st.floats(2.0, 100.0),
                "final_div_factor": st.floats(10.0, 1e5),
                "three_phase": st.booleans(),
            }
        ),
    ),
}


def torch_run(make_scheduler, lr, steps=STEPS, adam=False):
    """torch's ``param_groups[0]`` lr and momentum after 0..steps scheduler steps."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=lr) if adam else torch.optim.SGD([p], lr=lr, momentum=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = make_scheduler(opt)
        lrs, moms = [], []
        for k in range(steps + 1):
            if k:
                sched.step()
            group = opt.param_groups[0]
            lrs.append(group["lr"])
            moms.append(group["betas"][0] if adam else group["momentum"])
    return lrs, moms


def assert_same_sequence(schedule, make_scheduler, base_lr, steps=STEPS):
    lrs, moms = torch_run(make_scheduler, base_lr, steps)
    ours = [schedule(k) for k in range(steps + 1)]
    assert all(type(v) is float for v in ours)
    bad = [k for k in range(steps + 1) if ours[k] != lrs[k]]
    assert not bad, f"first mismatch at k={bad[0]}: {ours[bad[0]]!r} != torch {lrs[bad[0]]!r}"
    if schedule.momentum is not None:
        assert [schedule.momentum(k) for k in range(steps + 1)] == moms
    # cached: asking again (and out of order) gives the same values
    assert schedule(steps // 2) == lrs[steps // 2]


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_matches_torch(name, data):
    torch_cls, kwargs_strategy = CASES[name]
    kwargs = data.draw(kwargs_strategy)
    base_lr = data.draw(base_lrs)
    # cyclic_lr's base_lr is CyclicLR's own argument; the optimizer's lr is then irrelevant
    ours = getattr(S, name)(**{"base_lr": base_lr, **kwargs})
    assert_same_sequence(ours, lambda opt: torch_cls(opt, **kwargs), base_lr)


def test_known_recursive_quirks():
    # ConstantLR(1/3): lr * (1/3) * (1/(1/3)) is not exactly lr; cosine past T_max rises again.
    assert_same_sequence(S.constant_lr(0.01, factor=1 / 3), lambda o: T.ConstantLR(o, factor=1 / 3), 0.01)
    assert S.constant_lr(0.01, factor=1 / 3)(10) != 0.01  # the closed form would give 0.01
    cos = S.cosine_annealing_lr(0.1, T_max=50)
    assert_same_sequence(cos, lambda o: T.CosineAnnealingLR(o, T_max=50), 0.1)
    assert cos(75) > cos(50)


@settings(max_examples=6, deadline=None)
@given(base_lr=base_lrs, warm=st.integers(1, 100), sf=factors, t_max=st.integers(1, 1200), eta=etas)
def test_sequential_linear_warmup_then_cosine(base_lr, warm, sf, t_max, eta):
    ours = S.sequential_lr(
        base_lr,
        schedulers=[S.linear_lr(base_lr, start_factor=sf, total_iters=warm), S.cosine_annealing_lr(base_lr, T_max=t_max, eta_min=eta)],
        milestones=[warm],
    )

    def make(opt):
        subs = [T.LinearLR(opt, start_factor=sf, total_iters=warm), T.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta)]
        return T.SequentialLR(opt, subs, milestones=[warm])

    assert_same_sequence(ours, make, base_lr)


@settings(max_examples=6, deadline=None)
@given(base_lr=base_lrs, gamma=st.floats(0.99, 1.0), step_size=small_ints, step_gamma=gammas)
def test_chained_exponential_and_step(base_lr, gamma, step_size, step_gamma):
    ours = S.chained_scheduler(
        base_lr, schedulers=[S.exponential_lr(base_lr, gamma=gamma), S.step_lr(base_lr, step_size=step_size, gamma=step_gamma)]
    )

    def make(opt):
        return T.ChainedScheduler([T.ExponentialLR(opt, gamma=gamma), T.StepLR(opt, step_size=step_size, gamma=step_gamma)])

    assert_same_sequence(ours, make, base_lr)


def test_sequential_three_stages_with_restarts_and_one_cycle():
    def ours():
        return S.sequential_lr(
            0.05,
            schedulers=[
                S.constant_lr(0.05, factor=0.25, total_iters=7),
                S.cosine_annealing_warm_restarts(0.05, T_0=13, T_mult=2),
                S.one_cycle_lr(0.05, max_lr=0.3, total_steps=500),
            ],
            milestones=[20, 300],
        )

    def make(opt):
        subs = [T.ConstantLR(opt, factor=0.25, total_iters=7), T.CosineAnnealingWarmRestarts(opt, T_0=13, T_mult=2),
                T.OneCycleLR(opt, max_lr=0.3, total_steps=500)]
        return T.SequentialLR(opt, subs, milestones=[20, 300])

    assert_same_sequence(ours(), make, 0.05, steps=790)


def test_one_cycle_past_total_steps_raises_torch_error():
    ours = S.one_cycle_lr(0.1, max_lr=0.5, total_steps=20)
    p = torch.nn.Parameter(torch.zeros(1))
    sched = T.OneCycleLR(torch.optim.SGD([p], lr=0.1, momentum=0.9), max_lr=0.5, total_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(20):
            sched.step()
        with pytest.raises(ValueError) as torch_error:
            sched.step()
    assert isinstance(ours(20), float)
    for _ in range(2):  # keeps raising, like torch
        with pytest.raises(ValueError) as our_error:
            ours(21)
        assert str(our_error.value) == str(torch_error.value)


INVALID = [
    ("constant_lr", T.ConstantLR, {"factor": 1.5}),
    ("linear_lr", T.LinearLR, {"start_factor": 0.0}),
    ("linear_lr", T.LinearLR, {"end_factor": 2.0}),
    ("cosine_annealing_warm_restarts", T.CosineAnnealingWarmRestarts, {"T_0": 0}),
    ("cosine_annealing_warm_restarts", T.CosineAnnealingWarmRestarts, {"T_0": 5, "T_mult": 0}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": 0.1}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": 0.1, "total_steps": 0}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": 0.1, "epochs": 0, "steps_per_epoch": 3}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": 0.1, "total_steps": 10, "pct_start": 2.0}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": 0.1, "total_steps": 10, "anneal_strategy": "exp"}),
    ("one_cycle_lr", T.OneCycleLR, {"max_lr": [0.1, 0.2], "total_steps": 10}),
    ("cyclic_lr", T.CyclicLR, {"base_lr": 0.01, "max_lr": 0.1, "mode": "bad"}),
    ("multiplicative_lr", T.MultiplicativeLR, {"lr_lambda": [lambda e: 1.0, lambda e: 1.0]}),
]


@pytest.mark.parametrize("name,torch_cls,kwargs", INVALID)
def test_validation_messages_match_torch(name, torch_cls, kwargs):
    p = torch.nn.Parameter(torch.zeros(1))
    with pytest.raises(ValueError) as torch_error:
        torch_cls(torch.optim.SGD([p], lr=0.1, momentum=0.9), **kwargs)
    with pytest.raises(ValueError) as our_error:
        getattr(S, name)(**{"base_lr": 0.1, **kwargs})
    assert str(our_error.value) == str(torch_error.value)


def test_composites_validate():
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        S.sequential_lr(0.1, schedulers=[], milestones=[])
    with pytest.raises(ValueError, match="number of milestones"):
        S.sequential_lr(0.1, schedulers=[S.step_lr(0.1, 3)], milestones=[2])
    with pytest.raises(ValueError, match="same optimizer"):
        S.chained_scheduler(0.1, schedulers=[S.step_lr(0.2, 3)])


def test_jit_returns_float32_of_torch_value():
    schedule = S.one_cycle_lr(0.1, max_lr=0.5, total_steps=300)
    lrs, moms = torch_run(lambda o: T.OneCycleLR(o, max_lr=0.5, total_steps=300), 0.1, steps=300)
    lr_fn, mom_fn = jax.jit(schedule), jax.jit(schedule.momentum)
    for k in (0, 1, 89, 150, 299, 300):
        assert lr_fn(jnp.int32(k)).dtype == jnp.float32
        assert lr_fn(jnp.int32(k)) == np.float32(lrs[k])
        assert mom_fn(jnp.int32(k)) == np.float32(moms[k])
    assert np.array_equal(jax.vmap(schedule)(jnp.arange(5)), np.float32(lrs[:5]))


def test_per_epoch():
    schedule = S.step_lr(0.1, step_size=2, gamma=0.5)
    every_epoch = S.per_epoch(schedule, 3)
    assert [every_epoch(u) for u in range(30)] == [schedule(u // 3) for u in range(30)]
    assert jax.jit(every_epoch)(jnp.int32(13)) == np.float32(schedule(4))
    cyc = S.per_epoch(S.cyclic_lr(0.01, max_lr=0.1, step_size_up=4), 5)
    assert cyc.momentum(12) == S.cyclic_lr(0.01, max_lr=0.1, step_size_up=4).momentum(2)
    with pytest.raises(ValueError):
        S.per_epoch(schedule, 0)


def trajectories(torch_opt_fn, make_scheduler, jax_tx, steps=100, seed=0):
    """torch optimizer + scheduler stepped after each update, against ``jax.jit(tx.step)``."""
    rng = np.random.default_rng(seed)
    params = rng.standard_normal((7, 3)).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(params.copy()))
    opt = torch_opt_fn([p])
    sched = make_scheduler(opt)
    jax_params = jnp.asarray(params)
    state = jax_tx.init(jax_params)
    step = jax.jit(jax_tx.step)
    for _ in range(steps):
        grad = rng.standard_normal(params.shape).astype(np.float32)
        p.grad = torch.from_numpy(grad)
        opt.step()
        sched.step()
        jax_params, state = step(jnp.asarray(grad), state, jax_params)
    return {"w": p.detach()}, {"w": jax_params}


def test_sgd_with_sequential_schedule_end_to_end():
    schedule = S.sequential_lr(
        0.1, schedulers=[S.linear_lr(0.1, start_factor=0.1, total_iters=10), S.cosine_annealing_lr(0.1, T_max=90)],
        milestones=[10],
    )
    with strict_numerics():
        tx = optim.sgd(lr=schedule, momentum=0.9)

    def make(opt):
        return T.SequentialLR(opt, [T.LinearLR(opt, start_factor=0.1, total_iters=10), T.CosineAnnealingLR(opt, T_max=90)], [10])

    ref, out = trajectories(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), make, tx)
    assert_parity(ref, out)


def test_adam_with_one_cycle_momentum_end_to_end():
    schedule = S.one_cycle_lr(1e-3, max_lr=1e-2, total_steps=100)
    with strict_numerics():
        tx = optim.adam(lr=schedule, betas=(schedule.momentum, 0.999))
    ref, out = trajectories(
        lambda ps: torch.optim.Adam(ps, lr=1e-3), lambda o: T.OneCycleLR(o, max_lr=1e-2, total_steps=100), tx
    )
    assert_parity(ref, out, **sqrt_tolerances())
