"""Every scheduler driving a jax_impl optimizer: the float32 trajectory equals torch's bit for bit."""

import numpy as np
import pytest
import torch

from jax_impl import optim
from jax_impl.optim import lr_scheduler as S
from parity import strict_numerics
from tests.optim._scheduled import assert_same_trajectory

L = torch.optim.lr_scheduler
BASE = 0.05
STEPS = 60

# (torch scheduler builder, jax_impl schedule builder, cycles momentum)
CASES = {
    "LambdaLR": (lambda o: L.LambdaLR(o, lambda e: 0.97**e), lambda: S.lambda_lr(BASE, lr_lambda=lambda e: 0.97**e), False),
    "MultiplicativeLR": (lambda o: L.MultiplicativeLR(o, lambda e: 0.99), lambda: S.multiplicative_lr(BASE, lr_lambda=lambda e: 0.99), False),
    "StepLR": (lambda o: L.StepLR(o, 7, 0.5), lambda: S.step_lr(BASE, step_size=7, gamma=0.5), False),
    "MultiStepLR": (lambda o: L.MultiStepLR(o, [10, 30, 30], 0.3), lambda: S.multi_step_lr(BASE, milestones=[10, 30, 30], gamma=0.3), False),
    "ConstantLR": (lambda o: L.ConstantLR(o, 1 / 3, 9), lambda: S.constant_lr(BASE, factor=1 / 3, total_iters=9), False),
    "LinearLR": (lambda o: L.LinearLR(o, 0.2, 0.9, 25), lambda: S.linear_lr(BASE, start_factor=0.2, end_factor=0.9, total_iters=25), False),
    "ExponentialLR": (lambda o: L.ExponentialLR(o, 0.97), lambda: S.exponential_lr(BASE, gamma=0.97), False),
    "PolynomialLR": (lambda o: L.PolynomialLR(o, 40, 1.5), lambda: S.polynomial_lr(BASE, total_iters=40, power=1.5), False),
    "CosineAnnealingLR": (lambda o: L.CosineAnnealingLR(o, 20, 1e-3), lambda: S.cosine_annealing_lr(BASE, T_max=20, eta_min=1e-3), False),
    "CosineAnnealingWarmRestarts": (
        lambda o: L.CosineAnnealingWarmRestarts(o, 8, 2, 1e-4),
        lambda: S.cosine_annealing_warm_restarts(BASE, T_0=8, T_mult=2, eta_min=1e-4),
        False,
    ),
    "CyclicLR": (
        lambda o: L.CyclicLR(o, 0.01, 0.1, step_size_up=9, mode="exp_range", gamma=0.99),
        lambda: S.cyclic_lr(0.01, max_lr=0.1, step_size_up=9, mode="exp_range", gamma=0.99),
        True,
    ),
    "OneCycleLR": (lambda o: L.OneCycleLR(o, 0.2, total_steps=STEPS + 1), lambda: S.one_cycle_lr(BASE, max_lr=0.2, total_steps=STEPS + 1), True),
    "SequentialLR": (
        lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=10), L.CosineAnnealingLR(o, 40)], [10]),
        lambda: S.sequential_lr(BASE, schedulers=[S.linear_lr(BASE, start_factor=0.1, total_iters=10), S.cosine_annealing_lr(BASE, T_max=40)], milestones=[10]),
        False,
    ),
    "ChainedScheduler": (
        lambda o: L.ChainedScheduler([L.ExponentialLR(o, 0.98), L.StepLR(o, 11, 0.5)]),
        lambda: S.chained_scheduler(BASE, schedulers=[S.exponential_lr(BASE, gamma=0.98), S.step_lr(BASE, step_size=11, gamma=0.5)]),
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sgd_driven_by_scheduler_matches_torch(name):
    make_torch, make_ours, cycles = CASES[name]
    rng = np.random.default_rng(len(name))
    shapes = {"w": (6, 5), "b": (5,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    torch_params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    torch_opt = torch.optim.SGD(list(torch_params.values()), lr=BASE, momentum=0.9, nesterov=True)
    torch_sched = make_torch(torch_opt)
    schedule = make_ours()
    with strict_numerics():
        tx = optim.sgd(lr=schedule, momentum=schedule.momentum if cycles else 0.9, nesterov=True)
    assert_same_trajectory(torch_params, torch_opt, torch_sched, tx, params, shapes, rng, STEPS, uses_sqrt=False)
