"""``jax_impl.optim.swa_utils`` against ``torch.optim.swa_utils``: averaged weights, SWALR and update_bn."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from torch.optim import swa_utils as TS

import jax_impl.nn as jnn
from jax_impl.optim import lr_scheduler as S
from jax_impl.optim import swa_utils as JS
from parity import strict_numerics
from parity.convert import load_torch_state_dict

SHAPES = {"a": (5, 7), "b": (13,), "c": ()}

# name -> (torch kwargs, jax kwargs) builders
FNS = {
    "default": lambda: ({}, {}),
    "swa_avg_fn": lambda: ({"avg_fn": TS.get_swa_avg_fn()}, {"avg_fn": JS.get_swa_avg_fn()}),
    "swa_multi": lambda: ({"multi_avg_fn": TS.get_swa_multi_avg_fn()}, {"multi_avg_fn": JS.get_swa_multi_avg_fn()}),
    "ema_avg_fn": lambda: ({"avg_fn": TS.get_ema_avg_fn(0.9)}, {"avg_fn": JS.get_ema_avg_fn(0.9)}),
    "ema_multi": lambda: ({"multi_avg_fn": TS.get_ema_multi_avg_fn(0.999)},
                          {"multi_avg_fn": JS.get_ema_multi_avg_fn(0.999)}),
    "ema_multi_big_weight": lambda: ({"multi_avg_fn": TS.get_ema_multi_avg_fn(0.3)},
                                     {"multi_avg_fn": JS.get_ema_multi_avg_fn(0.3)}),
}


class _Holder(torch.nn.Module):
    def __init__(self, params: dict, buffers: dict) -> None:
        super().__init__()
        for k, v in params.items():
            setattr(self, k, torch.nn.Parameter(torch.from_numpy(v.copy())))
        for k, v in buffers.items():
            self.register_buffer(k, torch.from_numpy(v.copy()))


def _sequence(dtype: str, steps: int, seed: int):
    """Seeded parameter snapshots of a drifting trajectory (a random walk with a trend, several magnitudes)."""
    rng = np.random.default_rng(seed)
    p = {k: rng.standard_normal(s) * 10.0 ** rng.integers(-3, 3) for k, s in SHAPES.items()}
    out = []
    for _ in range(steps):
        p = {k: v + 0.1 * rng.standard_normal(np.shape(v)) * np.abs(v).mean() + 0.01 for k, v in p.items()}
        out.append({k: np.asarray(v, dtype) for k, v in p.items()})
    return out


def _run(fn: str, dtype: str, steps: int, use_buffers: bool = False, seed: int = 0):
    torch_kwargs, jax_kwargs = FNS[fn]()
    seq = _sequence(dtype, steps, seed)
    bufs = [{"rm": (s["b"] * 0.5).astype(dtype), "count": np.asarray(3 * i + 1, np.int64)} for i, s in enumerate(seq)]
    model = _Holder(seq[0], bufs[0])
    swa_t = TS.AveragedModel(model, use_buffers=use_buffers, **torch_kwargs)
    swa_j = JS.AveragedModel(use_buffers=use_buffers, **jax_kwargs)
    state = swa_j.init({k: jnp.asarray(v) for k, v in seq[0].items()}, {k: jnp.asarray(v) for k, v in bufs[0].items()})
    for params, buffers in zip(seq, bufs):
        with torch.no_grad():
            for k, v in params.items():
                getattr(model, k).copy_(torch.from_numpy(v))
            for k, v in buffers.items():
                getattr(model, k).copy_(torch.from_numpy(v))
        swa_t.update_parameters(model)
        state = swa_j.update_parameters(state, {k: jnp.asarray(v) for k, v in params.items()},
                                        {k: jnp.asarray(v) for k, v in buffers.items()})
    return swa_t, state


def _assert_same(swa_t, state) -> None:
    assert int(state.n_averaged) == int(swa_t.n_averaged)
    for k in SHAPES:
        np.testing.assert_array_equal(np.asarray(state.params[k]), getattr(swa_t.module, k).detach().numpy(), err_msg=k)
    for k in ("rm", "count"):
        np.testing.assert_array_equal(np.asarray(state.buffers[k]), getattr(swa_t.module, k).numpy(), err_msg=k)


@pytest.mark.parametrize("fn,dtype", [(fn, "float32") for fn in FNS] + [("default", "float64"), ("swa_multi", "float64")])
def test_averaged_model_bit_identical(fn, dtype):
    """12 updates of a seeded trajectory: every averaged parameter equals torch's bit for bit (both dtypes)."""
    with strict_numerics(0, x64=True):
        swa_t, state = _run(fn, dtype, 12)
        _assert_same(swa_t, state)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", list(FNS))
def test_averaged_model_bit_identical_100_updates(fn, dtype, seed):
    """100 updates, two more trajectories: still bit for bit."""
    with strict_numerics(0, x64=True):
        swa_t, state = _run(fn, dtype, 100, seed=seed)
        _assert_same(swa_t, state)


@pytest.mark.parametrize("fn", ["default", pytest.param("swa_avg_fn", marks=pytest.mark.slow),
                                pytest.param("ema_avg_fn", marks=pytest.mark.slow), "ema_multi"])
def test_use_buffers_averages_buffers_too(fn):
    """use_buffers=True averages float and integer buffers (torch's float32 maths truncated into int64)."""
    with strict_numerics(0, x64=True):
        swa_t, state = _run(fn, "float32", 30, use_buffers=True)
        _assert_same(swa_t, state)
        assert int(state.buffers["count"]) != 3 * 29 + 1  # averaged, not copied


def test_swa_multi_rejects_integer_buffers_as_torch():
    with strict_numerics(0, x64=True):
        with pytest.raises(RuntimeError, match="Integer division with addcdiv") as theirs:
            _run("swa_multi", "float32", 3, use_buffers=True)
        seq = _sequence("float32", 2, 0)
        swa = JS.AveragedModel(multi_avg_fn=JS.get_swa_multi_avg_fn(), use_buffers=True)
        state = swa.init(seq[0], {"count": jnp.asarray(1, jnp.int64)})
        state = swa.update_parameters(state, seq[0], {"count": jnp.asarray(1, jnp.int64)})
        with pytest.raises(RuntimeError) as mine:
            swa.update_parameters(state, seq[1], {"count": jnp.asarray(2, jnp.int64)})
        assert str(mine.value) == str(theirs.value)


def test_errors_match_torch():
    for bad in (-0.1, 1.5):
        for name in ("get_ema_avg_fn", "get_ema_multi_avg_fn"):
            with pytest.raises(ValueError) as theirs:
                getattr(TS, name)(bad)
            with pytest.raises(ValueError) as mine:
                getattr(JS, name)(bad)
            assert str(mine.value) == str(theirs.value)
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
        JS.AveragedModel(avg_fn=JS.get_swa_avg_fn(), multi_avg_fn=JS.get_swa_multi_avg_fn())


# --------------------------------------------------------------------------
# SWALR
# --------------------------------------------------------------------------


def _torch_lrs(base_lr, build, epochs, step):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    scheds = build(opt)
    lrs = [opt.param_groups[0]["lr"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(epochs):
            opt.step()
            step(scheds, epoch)
            lrs.append(opt.param_groups[0]["lr"])
    return lrs


SWALR_GRID = [
    (0.1, 0.05, 10, "cos"), (0.1, 0.05, 10, "linear"), (0.5, 0.01, 1, "cos"), (0.02, 0.2, 7, "linear"),
    (0.1, 0.05, 0, "cos"), (0.1, 0.05, 0, "linear"), (0.3, 0.3, 5, "cos"), (1e-3, 0.07, 29, "cos"),
]


@pytest.mark.parametrize("base_lr,swa_lr,anneal_epochs,strategy", SWALR_GRID)
def test_swalr_alone_exact(base_lr, swa_lr, anneal_epochs, strategy):
    """SWALR stepped every epoch: torch's Python floats exactly (==) over 30 epochs."""
    theirs = _torch_lrs(base_lr, lambda o: TS.SWALR(o, swa_lr, anneal_epochs, strategy), 30, lambda s, e: s.step())
    mine = JS.swalr(base_lr, swa_lr, anneal_epochs, strategy)
    assert [mine(k) for k in range(31)] == theirs


@pytest.mark.parametrize("swa_start", [0, 5, 14])
@pytest.mark.parametrize("base_lr,swa_lr,anneal_epochs,strategy", SWALR_GRID[:5])
def test_swalr_after_cosine_annealing_exact(swa_start, base_lr, swa_lr, anneal_epochs, strategy):
    """torch's SWA recipe (CosineAnnealingLR until swa_start, then SWALR): the same floats (==)."""

    def build(opt):
        return (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20, eta_min=1e-4),
                TS.SWALR(opt, swa_lr, anneal_epochs, strategy))

    def step(scheds, epoch):
        scheds[1].step() if epoch > swa_start else scheds[0].step()

    theirs = _torch_lrs(base_lr, build, 30, step)
    mine = JS.swa_lr_schedule(base_lr, S.cosine_annealing_lr(base_lr, T_max=20, eta_min=1e-4),
                              JS.swalr(base_lr, swa_lr, anneal_epochs, strategy), swa_start)
    assert [mine(k) for k in range(31)] == theirs


def test_swalr_drives_an_optimizer_under_jit():
    """The schedule is a host schedule: an optimizer under jax.jit reads the same lr as torch's group."""
    from jax_impl import optim

    schedule = JS.swalr(0.1, 0.05, 3, "linear")
    tx = optim.sgd(lr=schedule)
    params = {"w": jnp.ones((3,), jnp.float32)}
    state = tx.init(params)
    step = jax.jit(tx.step)
    for _ in range(5):
        params, state = step({"w": jnp.ones((3,), jnp.float32)}, state, params)
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = TS.SWALR(opt, 0.05, 3, "linear")
    for _ in range(5):
        p.grad = torch.ones(3)
        opt.step()
        sched.step()
    np.testing.assert_array_equal(np.asarray(params["w"]), p.detach().numpy())


def test_swalr_errors_match_torch():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for kwargs in ({"anneal_strategy": "exp"}, {"anneal_epochs": -1}, {"anneal_epochs": 2.5}):
        with pytest.raises(ValueError) as theirs:
            TS.SWALR(opt, 0.05, **kwargs)
        with pytest.raises(ValueError) as mine:
            JS.swalr(0.1, 0.05, **kwargs)
        assert str(mine.value) == str(theirs.value)


# --------------------------------------------------------------------------
# update_bn
# --------------------------------------------------------------------------


def _cnn(nn, **kw):
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, **kw), nn.BatchNorm2d(6, momentum=0.3, **kw), nn.ReLU(),
        nn.Flatten(), nn.Linear(6 * 4 * 4, 5, **kw), nn.BatchNorm1d(5, **kw), nn.ReLU(),
        nn.Linear(5, 4, **kw), nn.BatchNorm1d(4, momentum=None, **kw),
    )


def _bn_head(nn, **kw):  # the same BatchNorm kinds without the convolution: a quicker first compile
    return nn.Sequential(
        nn.BatchNorm2d(3, momentum=0.3, **kw), nn.Flatten(), nn.Linear(3 * 6 * 6, 5, **kw),
        nn.BatchNorm1d(5, momentum=None, **kw),
    )


def _batchnorms(model, kind):
    return [m for _, m in (model.named_modules() if kind is torch.nn else nnx.iter_graph(model))
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, jnn.BatchNorm1d, jnn.BatchNorm2d))]


@pytest.mark.parametrize("build,dtype,was_training", [
    (_bn_head, "float32", False),
    pytest.param(_cnn, "float32", False, marks=pytest.mark.slow),
    pytest.param(_cnn, "float64", False, marks=pytest.mark.slow),
    pytest.param(_cnn, "float32", True, marks=pytest.mark.slow),
    pytest.param(_cnn, "float64", True, marks=pytest.mark.slow),
])
def test_update_bn_matches_torch(build, dtype, was_training):
    """Running statistics after update_bn on the same weights: float64 within 1e-12, float32 measured."""
    with strict_numerics(0, x64=True):
        tdtype = getattr(torch, dtype)
        torch_model = build(torch.nn).to(tdtype)
        with torch.no_grad():  # non-trivial running stats, reset by update_bn
            for m in _batchnorms(torch_model, torch.nn):
                m.running_mean.uniform_(-1, 1)
                m.num_batches_tracked.fill_(7)
        mine = build(jnn, dtype=getattr(jnp, dtype))
        load_torch_state_dict(mine, torch_model)
        torch_model.train(was_training)
        mine.train(was_training)
        rng = np.random.default_rng(1)
        batches = [rng.standard_normal((4, 3, 6, 6)).astype(dtype) * 2 + 0.5 for _ in range(5)]
        loader = [(b, np.zeros(4)) for b in batches[:3]] + batches[3:]  # tuples contribute their first element
        TS.update_bn([(torch.from_numpy(x[0]), x[1]) if isinstance(x, tuple) else torch.from_numpy(x) for x in loader],
                     torch_model)
        JS.update_bn([(jnp.asarray(x[0]), x[1]) if isinstance(x, tuple) else jnp.asarray(x) for x in loader], mine)
        assert mine.training == torch_model.training == was_training
        # float32: batch statistics are reductions in other orders; measured up to 6.1e-7 relative per element
        # (float64: 1.5e-15).
        rtol = 1e-12 if dtype == "float64" else 1e-6
        for key, value in torch_model.state_dict().items():
            obj = mine
            for part in key.split("."):
                obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
            got = np.asarray(obj[...])
            if "num_batches_tracked" in key:
                assert int(got) == int(value) == 5
            else:
                np.testing.assert_allclose(got, value.numpy(), rtol=rtol, atol=rtol, err_msg=key)
        momenta = [m.momentum for m in _batchnorms(torch_model, torch.nn)]
        assert [m.momentum for m in _batchnorms(mine, jnn)] == momenta and momenta[0] == 0.3 and momenta[-1] is None


def test_update_bn_without_batchnorm_is_a_no_op():
    model = jnn.Sequential(jnn.Linear(3, 2))
    before = jax.tree.map(np.asarray, nnx.state(model))
    JS.update_bn([jnp.ones((2, 3))], model)
    after = jax.tree.map(np.asarray, nnx.state(model))
    jax.tree.map(np.testing.assert_array_equal, before, after)
