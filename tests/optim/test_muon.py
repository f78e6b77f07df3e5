"""``jax_impl.optim.muon`` against ``torch.optim.Muon``.

Everything but the bfloat16 matrix products is torch's arithmetic bit for
bit: with ``ns_steps=0`` (no products) parameters and momentum buffers are
bit-identical in float32 and float64, and the momentum buffers are
bit-identical in every run. The products are float32 sums rounded once to
bfloat16, as torch's oneDNN products are, but summed in XLA's order: a
bfloat16 rounding flips about once in 40000 elements per product and the
Newton-Schulz iteration spreads a flip over its matrix. Measured over 30
steps (float32, torch's defaults), relative Frobenius distance from torch:
0 to 2e-6 per matrix ((4, 7) to (64, 32)), where torch itself is 0 to 2.1e-6
from the same run with exactly rounded products.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.optim._muon as torch_muon

import jax_impl.optim
from tests.optim import _harness as H

SHAPES = {"wide": (4, 7), "tall": (9, 3), "square": (16, 16)}
LARGE_SHAPES = {"wide": (24, 40), "tall": (64, 32)}
# ||torch - ours|| / ||torch|| per parameter after 30 steps; measured <= 2e-6, see the module docstring.
FROBENIUS_BOUND = 1e-5


def run(kwargs, shapes, dtype, steps, seed, jit=True, exact_torch=False):
    """torch's and our parameters and momentum buffers after ``steps`` steps of the same gradients."""
    arrays = H.make_problem(H.Problem(seed=seed, shapes=shapes, steps=steps), dtype)
    with H.numerics(dtype):
        tx = jax_impl.optim.muon(**kwargs)
        tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in arrays.params.items()}
        opt = torch.optim.Muon(list(tparams.values()), **kwargs)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        state = jax.jit(tx.init)(params)
        step = jax.jit(tx.step) if jit else tx.step
        for grads in arrays.grads:
            for k, p in tparams.items():
                p.grad = torch.from_numpy(grads[k])
            opt.step()
            params, state = step(grads, state, params)
    torch_side = {k: p.detach().numpy() for k, p in tparams.items()}
    torch_side.update({f"momentum_buffer.{k}": opt.state[p]["momentum_buffer"].numpy() for k, p in tparams.items()})
    ours = {k: np.asarray(v) for k, v in params.items()}
    ours.update({f"momentum_buffer.{k}": np.asarray(v) for k, v in state.momentum_buffer.items()})
    return torch_side, ours


def exactly_rounded_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    """torch's iteration with every bfloat16 product computed in float64 and rounded once."""
    a, b, c = ns_coefficients
    x = grad.bfloat16()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = (x.double() @ x.double().T).bfloat16()
        update = (b * gram.double() + c * (gram.double() @ gram.double())).bfloat16()
        x = (a * x.double() + update.double() @ x.double()).bfloat16()
    return x.T if grad.size(0) > grad.size(1) else x


CONFIGS = [
    dict(ns_steps=0),
    dict(ns_steps=0, lr=0.02, weight_decay=0.0, momentum=0.9, nesterov=False, adjust_lr_fn="match_rms_adamw"),
    dict(ns_steps=0, lr=0.1, momentum=0.0, eps=1e-3, adjust_lr_fn="original"),
]


_DEFAULT_TIER = [("float32", 0), ("float64", 1)]


@pytest.mark.parametrize("dtype, config", [
    pytest.param(d, c, marks=() if (d, c) in _DEFAULT_TIER else pytest.mark.slow)
    for d in H.DTYPES for c in range(len(CONFIGS))
])
def test_muon_without_products_is_bit_identical(dtype, config):
    theirs, ours = run(CONFIGS[config], SHAPES, dtype, steps=8, seed=config)
    assert H.bitwise_equal(theirs, ours), {k: int(np.sum(theirs[k] != ours[k])) for k in theirs}


def _assert_close(theirs, ours):
    for k in theirs:
        if k.startswith("momentum_buffer."):
            assert H.bitwise_equal({k: theirs[k]}, {k: ours[k]}), k
        else:
            distance = np.linalg.norm(theirs[k] - ours[k]) / np.linalg.norm(theirs[k])
            assert distance <= FROBENIUS_BOUND, (k, distance)


def test_muon_within_measured_distance_small():
    theirs, ours = run({}, {"wide": (4, 7), "square": (16, 16)}, "float32", steps=10, seed=0)
    _assert_close(theirs, ours)


@pytest.mark.slow  # ~6 s
@pytest.mark.parametrize("dtype", H.DTYPES)
@pytest.mark.parametrize("kwargs", [{}, dict(lr=0.02, nesterov=False, ns_steps=3, adjust_lr_fn="match_rms_adamw")])
def test_muon_within_measured_distance(dtype, kwargs):
    theirs, ours = run(kwargs, LARGE_SHAPES, dtype, steps=30, seed=3)
    _assert_close(theirs, ours)


@pytest.mark.slow  # ~3 s
def test_muon_distance_comparable_to_torchs_own(monkeypatch):
    """Our distance from torch is of the order of torch's own distance from exactly rounded products."""
    theirs, ours = run({}, LARGE_SHAPES, "float32", steps=30, seed=4)
    monkeypatch.setattr(torch_muon, "_zeropower_via_newtonschulz", exactly_rounded_newton_schulz)
    exact, _ = run({}, LARGE_SHAPES, "float32", steps=30, seed=4)
    for k in LARGE_SHAPES:
        ours_distance = np.linalg.norm(theirs[k] - ours[k]) / np.linalg.norm(theirs[k])
        torch_distance = np.linalg.norm(theirs[k] - exact[k]) / np.linalg.norm(theirs[k])
        assert ours_distance <= 4 * torch_distance + 1e-7, (k, ours_distance, torch_distance)


def test_muon_signature_matches_torch():
    theirs = inspect.signature(torch.optim.Muon.__init__).parameters
    ours = inspect.signature(jax_impl.optim.muon).parameters
    assert {k: (p.kind, p.default) for k, p in theirs.items() if k not in ("self", "params")} == {
        k: (p.kind, p.default) for k, p in ours.items()
    }


@pytest.mark.parametrize("kwargs", [
    dict(lr=-1.0), dict(momentum=-0.1), dict(weight_decay=-0.1), dict(adjust_lr_fn="other"), dict(lr=float("nan")),
    dict(momentum=1.5),
])
def test_muon_validation(kwargs):
    try:
        torch.optim.Muon([torch.nn.Parameter(torch.zeros(2, 2))], **kwargs)
    except ValueError as exc:
        with pytest.raises(ValueError) as info:
            jax_impl.optim.muon(**kwargs)
        assert str(info.value) == str(exc)
    else:
        jax_impl.optim.muon(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(ns_steps=100), dict(ns_coefficients=(1.0, 2.0))])
def test_muon_step_time_errors_carry_torchs_message(kwargs):
    p = torch.nn.Parameter(torch.zeros(2, 2))
    p.grad = torch.ones(2, 2)
    with pytest.raises(ValueError) as theirs:
        torch.optim.Muon([p], **kwargs).step()
    with pytest.raises(ValueError) as ours:
        jax_impl.optim.muon(**kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4), ()])
def test_muon_refuses_non_matrices_like_torch(shape):
    with pytest.raises(ValueError) as theirs:
        torch.optim.Muon([torch.nn.Parameter(torch.zeros(shape))])
    with pytest.raises(ValueError) as ours:
        jax_impl.optim.muon().init({"w": jnp.zeros(shape)})
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("k", [pytest.param(0, marks=pytest.mark.slow), 3])
def test_muon_state_dict_round_trip_continues_like_torch(k):
    """torch's state_dict after k steps, loaded with parity.convert, then 3 more steps on both sides (ns_steps=0:
    bit-identical); and back to torch."""
    from parity.convert import optimizer_state_from_torch, optimizer_state_to_torch

    kwargs = dict(ns_steps=0, lr=0.02)
    shapes = {"fc.weight": (4, 3), "head": (2, 5)}
    arrays = H.make_problem(H.Problem(seed=5, shapes=shapes, steps=k + 3), "float32")
    tparams = {n: torch.nn.Parameter(torch.from_numpy(v.copy())) for n, v in arrays.params.items()}
    opt = torch.optim.Muon(list(tparams.values()), **kwargs)

    def torch_step(grads):
        for n, p in tparams.items():
            p.grad = torch.from_numpy(grads[n])
        opt.step()

    for grads in arrays.grads[:k]:
        torch_step(grads)
    params = {"fc": {"weight": jnp.asarray(tparams["fc.weight"].detach().numpy())},
              "head": jnp.asarray(tparams["head"].detach().numpy())}
    state = optimizer_state_from_torch(opt.state_dict(), params, name="Muon", param_names=list(shapes))
    tx = jax_impl.optim.muon(**kwargs)
    for grads in arrays.grads[k:]:
        torch_step(grads)
        params, state = tx.step({"fc": {"weight": grads["fc.weight"]}, "head": grads["head"]}, state, params)
    theirs = {n: p.detach().numpy() for n, p in tparams.items()}
    assert H.bitwise_equal(theirs, {"fc.weight": np.asarray(params["fc"]["weight"]), "head": np.asarray(params["head"])})
    back = optimizer_state_to_torch(state, params, name="Muon", param_names=list(shapes), hyperparameters=kwargs)
    for i, n in enumerate(shapes):
        assert np.array_equal(back["state"][i]["momentum_buffer"].numpy(), opt.state[tparams[n]]["momentum_buffer"].numpy())


def test_muon_follows_a_torch_lr_scheduler():
    """``lr`` as jax_impl's StepLR against torch's StepLR: the adjusted lr and the decay read the scheduled lr."""
    from jax_impl.optim import lr_scheduler

    kwargs = dict(ns_steps=0, weight_decay=0.05, adjust_lr_fn="match_rms_adamw")
    arrays = H.make_problem(H.Problem(seed=8, shapes={"w": (5, 3)}, steps=8), "float32")
    with H.numerics("float32"):
        tx = jax_impl.optim.muon(lr=lr_scheduler.step_lr(0.1, step_size=3, gamma=0.5), **kwargs)
        weight = torch.nn.Parameter(torch.from_numpy(arrays.params["w"].copy()))
        opt = torch.optim.Muon([weight], lr=0.1, **kwargs)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        params = {"w": jnp.asarray(arrays.params["w"])}
        state = tx.init(params)
        step = jax.jit(tx.step)
        for grads in arrays.grads:
            weight.grad = torch.from_numpy(grads["w"])
            opt.step()
            sched.step()
            params, state = step(grads, state, params)
    assert H.bitwise_equal({"w": weight.detach().numpy()}, {"w": np.asarray(params["w"])})
