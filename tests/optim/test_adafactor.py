"""``jax_impl.optim.adafactor`` against ``torch.optim.Adafactor``: bit-identical in float32 and float64.

Measured: every parameter and every ``row_var`` / ``col_var`` / ``variance``
bit-identical to torch (0 ULP) after 12-60 steps, for 0-d, 1-d, 2-d (incl.
``(m, 1)`` and ``(1, n)``) and 3-d parameters, jit and eager.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.optim
from tests.optim import _harness as H

SHAPES = {"scale": (), "bias": (5,), "weight": (4, 7), "conv": (2, 3, 9)}
EDGE_SHAPES = {"column": (9, 1), "row": (1, 9), "wide": (3, 37), "tall": (40, 6), "batched": (2, 1, 5)}


def run(kwargs, shapes, dtype, steps, seed, jit=True):
    """Same parameters and gradients through torch and jax_impl; returns the mismatching bits per array."""
    arrays = H.make_problem(H.Problem(seed=seed, shapes=shapes, steps=steps, zero_fraction=0.1), dtype)
    with H.numerics(dtype):
        tx = jax_impl.optim.adafactor(**kwargs)
        tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in arrays.params.items()}
        opt = torch.optim.Adafactor(list(tparams.values()), **kwargs)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        state = jax.jit(tx.init)(params)
        step = jax.jit(tx.step) if jit else tx.step
        for grads in arrays.grads:
            for k, p in tparams.items():
                p.grad = torch.from_numpy(grads[k])
            opt.step()
            params, state = step(grads, state, params)
        torch_side, jax_side = {}, {}
        for k, p in tparams.items():
            torch_side[k], jax_side[k] = p.detach().numpy(), np.asarray(params[k])
            torch_state = opt.state[p]
            assert float(torch_state["step"]) == int(state.count) == steps
            for field in ("row_var", "col_var", "variance"):
                ours = getattr(state, field)[k]
                if field in torch_state:
                    torch_side[f"{field}.{k}"], jax_side[f"{field}.{k}"] = torch_state[field].numpy(), np.asarray(ours)
                else:
                    assert ours is None, f"{field}.{k} is not kept by torch but holds a buffer"
    assert H.bitwise_equal(torch_side, jax_side), {
        k: int(np.sum(torch_side[k] != jax_side[k])) for k in torch_side if torch_side[k].shape == jax_side[k].shape
    }


CONFIGS = [
    {},
    dict(lr=0.05, beta2_decay=-0.5, eps=(1e-5, 1e-2), d=1.5, weight_decay=0.1, maximize=True),
    dict(lr=0.3, beta2_decay=0.0, eps=(1e-30, 0.0), weight_decay=1e-3),
    dict(lr=1e-3, beta2_decay=-1.0, d=4.0),
]


@pytest.mark.parametrize("dtype", H.DTYPES)
def test_adafactor_matches_torch(dtype):
    run(CONFIGS[1], {"scale": (), "bias": (5,), "conv": (2, 3, 9)}, dtype, steps=12, seed=1)


@pytest.mark.slow  # ~1 s
def test_adafactor_eager_matches_torch():
    run({}, {"weight": (3, 5), "bias": (5,)}, "float32", steps=5, seed=2, jit=False)


# Every config with both shape sets, each shape set and each config in both dtypes (the dtype alternates
# over configs and shape sets): every pair of the three axes, in 8 of their 16 combinations. Each case's
# time is its compile, one per leaf (the 60 steps take a tenth of it).
GRID = [(shapes, config, H.DTYPES[(config + s) % 2]) for s, shapes in enumerate(("shapes", "edge_shapes"))
        for config in range(len(CONFIGS))]


@pytest.mark.slow  # ~20 s: 8 compiles, 60 steps each
@pytest.mark.parametrize(("shapes", "config", "dtype"), GRID, ids=[f"{s}-{c}-{d}" for s, c, d in GRID])
def test_adafactor_grid_matches_torch(dtype, config, shapes):
    run(CONFIGS[config], SHAPES if shapes == "shapes" else EDGE_SHAPES, dtype, steps=60, seed=10 + config)


def test_adafactor_signature_matches_torch():
    theirs = inspect.signature(torch.optim.Adafactor.__init__).parameters
    ours = inspect.signature(jax_impl.optim.adafactor).parameters
    assert {k: (p.kind, p.default) for k, p in theirs.items() if k not in ("self", "params")} == {
        k: (p.kind, p.default) for k, p in ours.items()
    }


@pytest.mark.parametrize("kwargs", [
    dict(lr=-1e-2), dict(beta2_decay=0.5), dict(eps=(-1e-3, 1e-3)), dict(eps=(None, -1e-3)), dict(d=0.5),
    dict(weight_decay=-0.1), dict(lr=float("nan")), dict(eps=(0.0, 0.0), d=1.0),
])
def test_adafactor_validation(kwargs):
    try:
        torch.optim.Adafactor([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    except ValueError as exc:
        with pytest.raises(ValueError) as info:
            jax_impl.optim.adafactor(**kwargs)
        assert str(info.value) == str(exc)
    else:
        jax_impl.optim.adafactor(**kwargs)


def test_adafactor_follows_a_torch_lr_scheduler():
    """``lr`` as jax_impl's StepLR (a host schedule) against torch's StepLR stepped after every step: the step
    size min(lr, 1/sqrt(t)) and the decay 1 - lr * weight_decay read the scheduled lr (lr > 1/sqrt(t) early)."""
    from jax_impl.optim import lr_scheduler

    shapes = {"weight": (3, 4), "bias": (4,)}
    arrays = H.make_problem(H.Problem(seed=7, shapes=shapes, steps=10), "float32")
    with H.numerics("float32"):
        tx = jax_impl.optim.adafactor(lr=lr_scheduler.step_lr(0.8, step_size=3, gamma=0.5), weight_decay=0.1)
        tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in arrays.params.items()}
        opt = torch.optim.Adafactor(list(tparams.values()), lr=0.8, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        state = tx.init(params)
        step = jax.jit(tx.step)
        for grads in arrays.grads:
            for k, p in tparams.items():
                p.grad = torch.from_numpy(grads[k])
            opt.step()
            sched.step()
            params, state = step(grads, state, params)
    theirs = {k: p.detach().numpy() for k, p in tparams.items()}
    assert H.bitwise_equal(theirs, {k: np.asarray(v) for k, v in params.items()})
