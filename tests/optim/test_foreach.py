"""``foreach=True``: every optimizer against torch's multi-tensor CPU path (``torch.optim.X(..., foreach=True)``).

On CPU torch's ``_foreach_*`` kernels run the per-tensor kernels one tensor at
a time, so foreach differs from the single-tensor path only where
``_multi_tensor_X`` orders its operations or builds its host scalars
differently. Measured with torch 2.13 (100 steps, 4 leaves, float32 and
float64): Adam, AdamW, SGD, Adagrad, Adadelta, Adamax, RMSprop and Rprop
give torch's single-tensor bits with foreach; ASGD, NAdam, RAdam and
Adafactor do not (up to all 65 elements of the tree apart after 100 steps),
and ``test_foreach_and_single_tensor_differ_and_ours_follow_each`` shows a
case of each where we follow both paths. The bar is the harness's: bit for
bit wherever ``probe_torch_sqrt()`` recognises torch's sqrt (and always for
the sqrt-free SGD, Adamax, ASGD and Rprop); Adafactor's sqrt is IEEE
(``rsqrt_``) and is compared bit for bit unconditionally.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.optim
from tests.optim import _harness as H

SHAPES = {"fc.weight": (7, 5), "fc.bias": (5,), "scale": (), "conv": (3, 4, 2)}
# The grid's leaves for the elementwise optimizers (all but Adafactor, whose factored second moment needs
# SHAPES' 1-d, 2-d and 3-d leaves): as many elements as SHAPES, in half the leaves, since each leaf is its
# own trace and compile while the arithmetic per element does not depend on the leaf's rank. 63 elements
# end in a remainder of torch's vectorized loops in both dtypes; the 0-d leaf runs their scalar path alone.
ELEMENTWISE_SHAPES = {"fc.weight": (7, 9), "scale": ()}
SMALL_SHAPES = {"fc.weight": (4, 3), "fc.bias": (3,), "scale": ()}  # the default tier's: fewer, smaller compiles


def _grid(name: str) -> list[dict]:
    """A seeded grid of each optimizer's options: every combination of its switches, drawn hyperparameters."""
    rng = np.random.default_rng(sum(map(ord, name)))

    def lr(lo, hi):
        return float(10 ** rng.uniform(np.log10(lo), np.log10(hi)))

    def betas():
        return (float(rng.choice([0.0, 0.5, 0.9, rng.uniform(0.0, 0.99)])), float(rng.choice([0.9, 0.99, 0.999])))

    configs = []
    if name in ("adam", "adamw"):
        for amsgrad, maximize, wd in itertools.product([False, True], [False, True], [0.0, 1e-2]):
            extra = {"decoupled_weight_decay": bool(rng.integers(2))} if name == "adam" else {}
            configs.append(dict(lr=lr(1e-4, 0.1), betas=betas(), eps=lr(1e-10, 1e-3), weight_decay=wd,
                                amsgrad=amsgrad, maximize=maximize, **extra))
    elif name == "sgd":
        for momentum, nesterov, maximize in itertools.product([0.0, 0.9], [False, True], [False, True]):
            if nesterov and momentum == 0:
                continue
            configs.append(dict(lr=lr(1e-3, 0.1), momentum=momentum, nesterov=nesterov, maximize=maximize,
                                dampening=0.0 if nesterov else float(rng.choice([0.0, 0.1])),
                                weight_decay=float(rng.choice([0.0, 1e-3]))))
    elif name == "adagrad":
        for lr_decay, wd, maximize in itertools.product([0.0, 1e-3], [0.0, 1e-2], [False, True]):
            configs.append(dict(lr=lr(1e-3, 0.1), lr_decay=lr_decay, weight_decay=wd, maximize=maximize,
                                initial_accumulator_value=float(rng.choice([0.0, 0.1])), eps=lr(1e-10, 1e-6)))
    elif name == "adadelta":
        for wd, maximize in itertools.product([0.0, 1e-2], [False, True]):
            configs.append(dict(lr=lr(0.1, 1.0), rho=float(rng.uniform(0.5, 0.95)), eps=lr(1e-8, 1e-5),
                                weight_decay=wd, maximize=maximize))
    elif name == "adamax":
        for wd, maximize in itertools.product([0.0, 1e-2], [False, True]):
            configs.append(dict(lr=lr(1e-4, 0.1), betas=betas(), eps=lr(1e-10, 1e-3), weight_decay=wd, maximize=maximize))
    elif name == "asgd":
        # Every exponent ATen's pow special-cases (alpha = 0.5 is refused), and two it does not.
        alphas = iter([0.75, 1.0, 2.0, 3.0, -0.5, -1.0, -2.0, 0.6])
        for wd, maximize, alpha in ((wd, m, next(alphas)) for wd, m in itertools.product([0.0, 1e-3], [False, True])
                                    for _ in range(2)):
            configs.append(dict(lr=lr(1e-3, 0.1), lambd=lr(1e-5, 1e-2), alpha=alpha, t0=float(rng.choice([5, 40, 1e6])),
                                weight_decay=wd, maximize=maximize))
    elif name == "nadam":
        for wd, decoupled, maximize in itertools.product([0.0, 1e-2], [False, True], [False, True]):
            configs.append(dict(lr=lr(1e-4, 0.1), betas=betas(), eps=lr(1e-10, 1e-3), weight_decay=wd,
                                decoupled_weight_decay=decoupled, maximize=maximize,
                                momentum_decay=float(rng.choice([4e-3, 1e-2]))))
    elif name == "radam":
        for wd, decoupled, maximize in itertools.product([0.0, 1e-2], [False, True], [False, True]):
            # beta2 0.9 (rectified from step 13) to 0.999 (from step 6): both branches within 100 steps.
            configs.append(dict(lr=lr(1e-4, 0.1), betas=(float(rng.choice([0.0, 0.9])), float(rng.choice([0.9, 0.999]))),
                                eps=lr(1e-10, 1e-3), weight_decay=wd, decoupled_weight_decay=decoupled, maximize=maximize))
    elif name == "rmsprop":
        for centered, momentum, maximize in itertools.product([False, True], [0.0, 0.5], [False, True]):
            configs.append(dict(lr=lr(1e-4, 1e-2), alpha=float(rng.uniform(0.8, 0.99)), eps=lr(1e-10, 1e-6),
                                centered=centered, momentum=momentum, maximize=maximize,
                                weight_decay=float(rng.choice([0.0, 1e-2]))))
    elif name == "rprop":
        for maximize in (False, True):
            configs.append(dict(lr=lr(1e-4, 0.1), etas=(float(rng.uniform(0.1, 0.9)), float(rng.uniform(1.05, 2.0))),
                                step_sizes=(lr(1e-8, 1e-4), lr(0.1, 50.0)), maximize=maximize))
    elif name == "adafactor":
        for wd, maximize in itertools.product([0.0, 0.1], [False, True]):
            configs.append(dict(lr=lr(1e-3, 0.3), beta2_decay=float(rng.choice([-0.8, -0.5, 0.0])),
                                eps=(rng.choice([None, 1e-5]), float(rng.choice([1e-3, 0.0]))),
                                d=float(rng.choice([1.0, 1.5])), weight_decay=wd, maximize=maximize))
    return configs


NAMES = (*H.all_names(), "adafactor")
# _multi_tensor_X's arithmetic is not _single_tensor_X's (see each module's docstring).
DIFFERS = ("asgd", "nadam", "radam", "adafactor")


def _run_adafactor(kwargs: dict, arrays: H.Arrays) -> tuple[dict, dict]:
    """torch's Adafactor and ours over the same gradients: (torch's params and state, ours), as NumPy."""
    dtype = str(next(iter(arrays.params.values())).dtype)
    with H.numerics(dtype):
        tx = jax_impl.optim.adafactor(**kwargs)
        tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in arrays.params.items()}
        opt = torch.optim.Adafactor(list(tparams.values()), **kwargs)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        state = tx.init(params)  # eager: its zeros compile once per leaf shape and dtype, not once per case
        step = jax.jit(tx.step)
        for grads in arrays.grads:
            for k, p in tparams.items():
                p.grad = torch.from_numpy(np.array(grads[k]))
            opt.step()
            params, state = step(grads, state, params)
        torch_side = {k: p.detach().numpy().copy() for k, p in tparams.items()}
        jax_side = {k: np.asarray(v) for k, v in params.items()}
        for k, p in tparams.items():
            for field in ("row_var", "col_var", "variance"):
                if field in opt.state[p]:
                    torch_side[f"{field}.{k}"] = opt.state[p][field].numpy().copy()
                    jax_side[f"{field}.{k}"] = np.asarray(getattr(state, field)[k])
    return torch_side, jax_side


def _mismatches(a: dict, b: dict) -> dict[str, int]:
    return {k: int(np.sum(np.asarray(a[k]).view(f"u{a[k].dtype.itemsize}") != np.asarray(b[k]).view(f"u{b[k].dtype.itemsize}")))
            for k in a}


def check(name: str, kwargs: dict, dtype: str, steps: int, seed: int, shapes: dict = SHAPES) -> dict:
    """Ours with ``kwargs`` against torch with ``kwargs``; returns torch's final parameters."""
    arrays = H.make_problem(H.Problem(seed=seed, shapes=shapes, steps=steps, zero_fraction=0.05), dtype)
    if name == "adafactor":
        theirs, ours = _run_adafactor(kwargs, arrays)
        assert H.bitwise_equal(theirs, ours), (kwargs, dtype, _mismatches(theirs, ours))
        return {k: v for k, v in theirs.items() if k in shapes}
    traj = H.run_both(name, kwargs, arrays, jit_init=False)  # the init's ops compile once for the module
    H.assert_matches_torch(name, traj, dtype, kwargs=kwargs)
    return traj.torch_params




def _in_grid(name: str, index: int, dtype_index: int) -> bool:
    """Whether config ``index`` of ``name``'s grid runs in ``H.DTYPES[dtype_index]``.

    ASGD, whose configs each hold one of the pow exponents, runs every config in both dtypes. NAdam, RAdam
    and Adafactor (their own foreach arithmetic, grids of every combination of 3 or 2 switches, the index's
    bits) run the half whose dtype is the parity of the switches on: each switch, on and off, in both dtypes
    (each dtype also in test_foreach_and_single_tensor_differ_and_ours_follow_each). The others alternate
    the dtype over their grid (their foreach arithmetic is the single-tensor one, tested in both dtypes in
    its own files).
    """
    if name == "asgd":
        return True
    if name in DIFFERS:
        return index.bit_count() % 2 == dtype_index
    return (index + dtype_index) % 2 == 0


CASES = [(name, i, dtype) for name in NAMES for i in range(len(_grid(name))) for j, dtype in enumerate(H.DTYPES)
         if _in_grid(name, i, j)]


@pytest.mark.slow  # ~1 min in all: a compile per case, which takes longer than its 100 steps
@pytest.mark.parametrize(("name", "index", "dtype"), CASES, ids=[f"{n}-{i}-{d}" for n, i, d in CASES])
def test_foreach_grid_matches_torch(name, index, dtype):
    shapes = SHAPES if name == "adafactor" else ELEMENTWISE_SHAPES
    check(name, {**_grid(name)[index], "foreach": True}, dtype, steps=100, seed=index, shapes=shapes)


# The default tier: the grid's last config (its switches on) of a few optimizers whose foreach arithmetic is
# the single-tensor one, 10 steps.
@pytest.mark.parametrize(("name", "dtype"), [("adam", "float32"), ("rmsprop", "float64"), ("sgd", "float32")])
def test_foreach_matches_torch(name, dtype):
    check(name, {**_grid(name)[-1], "foreach": True}, dtype, steps=10, seed=0, shapes=SMALL_SHAPES)


# A case per optimizer where torch's two paths end on different bits (seed 3, SMALL_SHAPES), and its steps:
# measured, torch's NAdam paths differ after steps 1-8 in float64 (1-ULP gaps cancel at 9-27) and 3+ in
# float32; RAdam's after 15+ in float64 (the rectified steps start at 13 with beta2 0.9) and 1+ in float32;
# ASGD's and Adafactor's after every step.
FOLLOW_EACH = {
    "asgd": (dict(lr=0.05, lambd=1e-3, alpha=0.75, t0=3, weight_decay=1e-3), 5),
    "nadam": (dict(lr=1e-2, weight_decay=1e-2, momentum_decay=1e-2), 5),
    "radam": (dict(lr=1e-2, betas=(0.9, 0.9), weight_decay=1e-2, decoupled_weight_decay=True), 16),
    "adafactor": (dict(lr=0.05, weight_decay=0.1, maximize=True), 5),
}


# ASGD float32 in the default tier (its foreach arithmetic differs most), the rest in the slow one.
FOLLOW_EACH_CASES = [
    pytest.param(name, dtype, marks=[] if (name, dtype) == ("asgd", "float32") else [pytest.mark.slow])
    for name in DIFFERS for dtype in H.DTYPES
]


@pytest.mark.parametrize(("name", "dtype"), FOLLOW_EACH_CASES)
def test_foreach_and_single_tensor_differ_and_ours_follow_each(name, dtype):
    kwargs, steps = FOLLOW_EACH[name]
    multi = check(name, {**kwargs, "foreach": True}, dtype, steps, seed=3, shapes=SMALL_SHAPES)
    single = check(name, {**kwargs, "foreach": False}, dtype, steps, seed=3, shapes=SMALL_SHAPES)
    assert not H.bitwise_equal(multi, single), f"torch's foreach and single-tensor {name} agree here: no evidence"


@pytest.mark.parametrize("name", ["asgd", "nadam", "radam", "adam", "rmsprop"])
@pytest.mark.parametrize("flag", ["capturable", "differentiable"])
def test_capturable_and_differentiable_stay_refused_with_foreach(name, flag):
    with pytest.raises(NotImplementedError, match=flag):
        getattr(jax_impl.optim, name)(foreach=True, **{flag: True})


def test_asgd_foreach_alpha_half_is_refused():
    with pytest.raises(NotImplementedError, match="sqrt"):
        jax_impl.optim.asgd(foreach=True, alpha=0.5)
