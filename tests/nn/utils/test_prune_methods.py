"""jax_impl.nn.utils.prune's mask-computing methods against torch.nn.utils.prune, run side by side.

A seeded grid draws sequences of pruning calls (each method, ``amount`` as a count and as a fraction,
``dim``, ``n``, importance scores) on Linear and Conv2d layers holding the same weights, some with many tied
magnitudes (weights rounded to a few values, where ``topk``'s order among equals decides), and
``global_unstructured`` over several layers, some pruned before. After every call the state dicts (masks
and ``_orig``) equal torch's bit for bit: masks are 0/1 and the choices are torch's ``topk`` indices on the
same values and draws. torch's global random stream is seeded alike on both sides and checked equal after.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.utils.prune as tprune
from flax import nnx

import jax_impl.random
from jax_impl import nn as jnn
from jax_impl.nn.utils import prune as jprune
from parity.convert import load_torch_state_dict, module_state

_DTYPES = {torch.float32: jnp.float32, torch.float64: jnp.float64}


def _layers(kind: str, dtype, rng: np.random.Generator, tied: bool):
    if kind == "linear":
        t, j = torch.nn.Linear(6, 5, dtype=dtype), jnn.Linear(6, 5, dtype=_DTYPES[dtype])
    else:
        t, j = torch.nn.Conv2d(3, 6, 2, dtype=dtype), jnn.Conv2d(3, 6, 2, dtype=_DTYPES[dtype])
    if tied:  # a few magnitudes, both signs: topk's choice among equal values decides the mask
        with torch.no_grad():
            t.weight.copy_(torch.from_numpy(rng.integers(-3, 4, t.weight.shape) / 4).to(dtype))
    load_torch_state_dict(j, t.state_dict())
    return t, j


def _assert_same(t, j):
    theirs, ours = t.state_dict(), module_state(j)
    assert sorted(theirs) == sorted(ours)
    for key, value in theirs.items():
        assert np.asarray(ours[key][...]).dtype == value.numpy().dtype, key
        np.testing.assert_array_equal(np.asarray(ours[key][...]), value.numpy(), err_msg=key)


def _call(rng: np.random.Generator, ndim: int):
    """One pruning call drawn: (method name, arguments)."""
    name = rng.choice(["l1_unstructured", "random_unstructured", "ln_structured", "random_structured",
                       "identity", "l1_scores"])
    amount = float(rng.choice([0.0, 0.2, 0.35, 0.5, 1.0])) if rng.random() < 0.6 else int(rng.integers(0, 3))
    dim = int(rng.integers(-ndim, ndim))
    norms = [1, 2, 3, "fro", math.inf, -math.inf] if ndim == 2 else [1, 2, 0.5, math.inf, -math.inf]
    return str(name), amount, dim, norms[rng.integers(len(norms))]


def _apply(lib, module, call, scores):
    name, amount, dim, n = call
    if name == "l1_unstructured":
        return lib.l1_unstructured(module, "weight", amount)
    if name == "l1_scores":
        return lib.l1_unstructured(module, "weight", amount, importance_scores=scores)
    if name == "random_unstructured":
        return lib.random_unstructured(module, "weight", amount)
    if name == "ln_structured":
        return lib.ln_structured(module, "weight", amount, n, dim)
    if name == "random_structured":
        return lib.random_structured(module, "weight", amount, dim)
    return lib.identity(module, "weight")


# six seeds in the default tier, six more in the slow one
@pytest.mark.parametrize("seed", [*range(6), *(pytest.param(s, marks=pytest.mark.slow) for s in range(6, 12))])
def test_pruning_sequences_match_torch(seed):
    rng = np.random.default_rng(seed)
    dtype = torch.float64 if seed % 3 else torch.float32
    with jax.enable_x64(True):
        t, j = _layers("linear" if seed % 2 else "conv", dtype, rng, tied=seed % 4 < 2)
        torch.manual_seed(seed)
        jax_impl.random.manual_seed(seed)
        for _ in range(3):
            call = _call(rng, t.weight.ndim)
            scores = rng.standard_normal(t.weight.shape)
            try:
                _apply(tprune, t, call, torch.from_numpy(scores).to(dtype))
            except (ValueError, IndexError) as error:  # an amount over what is left: the same error, then stop
                with pytest.raises(type(error), match=re.escape(str(error))):
                    _apply(jprune, j, call, jnp.asarray(scores, _DTYPES[dtype]))
                return
            _apply(jprune, j, call, jnp.asarray(scores, _DTYPES[dtype]))
            _assert_same(t, j)
            np.testing.assert_array_equal(np.asarray(j.weight), t.weight.detach().numpy(), err_msg=str(call))
        assert torch.rand(3).tolist() == jax_impl.random.rand(3).tolist()  # the same draws consumed
        tprune.remove(t, "weight")
        jprune.remove(j, "weight")
        _assert_same(t, j)


@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.slow) for s in range(3, 6))])
def test_global_unstructured_matches_torch(seed):
    rng = np.random.default_rng(100 + seed)
    dtype = torch.float64 if seed % 2 else torch.float32
    with jax.enable_x64(True):
        pairs = [_layers(kind, dtype, rng, tied=seed < 3) for kind in ("conv", "linear", "linear")]
        torch.manual_seed(seed)
        jax_impl.random.manual_seed(seed)
        if seed % 3:  # some layers pruned before, by a method of their own
            tprune.random_unstructured(pairs[1][0], "weight", 0.3)
            jprune.random_unstructured(pairs[1][1], "weight", 0.3)
            tprune.ln_structured(pairs[0][0], "weight", 2, 2, 0)
            jprune.ln_structured(pairs[0][1], "weight", 2, 2, 0)
        method = (tprune.L1Unstructured, jprune.L1Unstructured) if seed < 4 else \
            (tprune.RandomUnstructured, jprune.RandomUnstructured)
        amount = [0.4, 17, 0.25, 1.0, 0.5, 9][seed]
        scores = rng.standard_normal(pairs[2][0].weight.shape)
        tprune.global_unstructured([(t, "weight") for t, _ in pairs], method[0], amount=amount,
                                   importance_scores={(pairs[2][0], "weight"): torch.from_numpy(scores).to(dtype)})
        jprune.global_unstructured([(j, "weight") for _, j in pairs], method[1], amount=amount,
                                   importance_scores={(pairs[2][1], "weight"): jnp.asarray(scores, _DTYPES[dtype])})
        for t, j in pairs:
            _assert_same(t, j)
        assert torch.rand(3).tolist() == jax_impl.random.rand(3).tolist()


def test_a_pruned_layer_trains_as_torchs():
    """The gradient of a layer pruned by l1 then ln_structured: none through pruned entries, the rest
    float64 within 1e-12 of torch's."""
    with jax.enable_x64(True):
        t, j = _layers("conv", torch.float64, np.random.default_rng(0), tied=False)
        for lib, m in ((tprune, t), (jprune, j)):
            lib.l1_unstructured(m, "weight", 0.3)
            lib.ln_structured(m, "weight", 1, 1, dim=0)
        x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
        (t(x) ** 2).sum().backward()
        g = nnx.grad(lambda m: (m(jnp.asarray(x.numpy())) ** 2).sum())(j)
        np.testing.assert_allclose(np.asarray(g["weight_orig"][...]), t.weight_orig.grad.numpy(), rtol=1e-12,
                                   atol=1e-12)
        assert not np.asarray(g["weight_orig"][...])[t.weight_mask.numpy() == 0].any()


def test_errors_are_torchs():
    j = jnn.Linear(4, 3)
    t = torch.nn.Linear(4, 3)
    cases = [
        (lambda lib, m: lib.l1_unstructured(m, "weight", -1), ValueError, "non-negative integer"),
        (lambda lib, m: lib.l1_unstructured(m, "weight", 1.5), ValueError, "float in the range"),
        (lambda lib, m: lib.l1_unstructured(m, "weight", "0.5"), TypeError, "Invalid type for amount"),
        (lambda lib, m: lib.l1_unstructured(m, "weight", 13), ValueError, "should be smaller than the number"),
        (lambda lib, m: lib.ln_structured(m, "bias", 1, 2, 0), ValueError, "multidimensional tensors"),
        (lambda lib, m: lib.random_structured(m, "weight", 1, 2), IndexError, "Invalid index 2"),
        (lambda lib, m: lib.global_unstructured([(m, "weight")], lib.LnStructured, amount=1, n=2),
         TypeError, "Only \"unstructured\" PRUNING_TYPE"),
        (lambda lib, m: lib.global_unstructured([(m, "weight")], lib.L1Unstructured, importance_scores=[], amount=1),
         TypeError, "importance_scores must be of type dict"),
    ]
    for fn, error, message in cases:
        with pytest.raises(error, match=message):
            fn(tprune, t)
        with pytest.raises(error, match=message):
            fn(jprune, j)
    assert not jprune.is_pruned(j) and not tprune.is_pruned(t)  # a failed call leaves the layer as it was


def test_your_own_method_as_in_torchs_tutorial():
    """torch's pruning tutorial's ``FooBarPruningMethod`` (every other entry), written for each side, applied
    after ``l1_unstructured``: it acts on the entries left, as torch's container does."""

    class TorchFooBar(tprune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            mask = default_mask.clone()
            mask.view(-1)[::2] = 0
            return mask

    class JaxFooBar(jprune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            return default_mask.reshape(-1).at[::2].set(0).reshape(default_mask.shape)

    t, j = _layers("linear", torch.float32, np.random.default_rng(3), tied=False)
    tprune.l1_unstructured(t, "weight", 0.25)
    jprune.l1_unstructured(j, "weight", 0.25)
    TorchFooBar.apply(t, "bias")
    JaxFooBar.apply(j, "bias")
    method = JaxFooBar.apply(j, "weight")
    TorchFooBar.apply(t, "weight")
    assert isinstance(method, jprune.PruningContainer) and isinstance(method[-1], JaxFooBar)
    _assert_same(t, j)


@pytest.mark.slow  # about 6 s: fc1's 48,000 weights through topk several times
def test_the_pruning_tutorials_sequence_on_its_lenet():
    """torch's pruning tutorial's calls on its LeNet (conv 1-6-16, fc 400-120-84-10; float32): random then l1
    then ln_structured on one layer and ``remove``, l1 on every layer of a second model, then
    ``global_unstructured`` over all weights: every state dict bit for bit torch's, and the pruned layers'
    outputs within 1e-5 of torch's (float32 sums)."""
    shapes = {"conv1": (1, 6), "conv2": (6, 16), "fc1": (400, 120), "fc2": (120, 84), "fc3": (84, 10)}

    def lenet():
        t = {name: (torch.nn.Conv2d(*io, 3) if name.startswith("conv") else torch.nn.Linear(*io))
             for name, io in shapes.items()}
        j = {name: (jnn.Conv2d(*io, 3) if name.startswith("conv") else jnn.Linear(*io))
             for name, io in shapes.items()}
        for name in shapes:
            load_torch_state_dict(j[name], t[name].state_dict())
        return t, j

    torch.manual_seed(0)
    jax_impl.random.manual_seed(0)
    t, j = lenet()
    for lib, m in ((tprune, t["conv1"]), (jprune, j["conv1"])):
        lib.random_unstructured(m, "weight", amount=0.3)
        lib.l1_unstructured(m, "bias", amount=3)
        lib.ln_structured(m, "weight", amount=0.5, n=2, dim=0)
    _assert_same(t["conv1"], j["conv1"])
    tprune.remove(t["conv1"], "weight")
    jprune.remove(j["conv1"], "weight")
    _assert_same(t["conv1"], j["conv1"])

    t, j = lenet()
    for lib, layers in ((tprune, t), (jprune, j)):
        for name, layer in layers.items():
            lib.l1_unstructured(layer, "weight", amount=0.2 if name.startswith("conv") else 0.4)
        lib.global_unstructured([(layer, "weight") for layer in layers.values()], lib.L1Unstructured, amount=0.2)
    for name in shapes:
        _assert_same(t[name], j[name])

    x = torch.randn(2, 1, 32, 32)
    y = torch.relu(t["conv1"](x)).amax((2, 3))
    ours = jnp.max(jax.nn.relu(j["conv1"](jnp.asarray(x.numpy()))), axis=(2, 3))
    np.testing.assert_allclose(np.asarray(ours), y.detach().numpy(), rtol=1e-5, atol=1e-6)
    z = torch.randn(2, 400)
    np.testing.assert_allclose(np.asarray(j["fc1"](jnp.asarray(z.numpy()))), t["fc1"](z).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_more_errors_are_torchs():
    """``amount=True`` (torch's topk/kthvalue refuse a bool count), a missing attribute, masks and scores of
    another shape: torch's exception types and messages."""
    cases = [
        lambda lib, m: lib.l1_unstructured(m, "weight", True),
        lambda lib, m: lib.random_unstructured(m, "weight", True),
        lambda lib, m: lib.random_structured(m, "weight", True, 0),
        lambda lib, m: lib.l1_unstructured(m, "foo", 1),
        lambda lib, m: lib.custom_from_mask(m, "weight", np.ones(3)),
        lambda lib, m: lib.l1_unstructured(m, "weight", 1, importance_scores=np.ones((2, 2))),
        lambda lib, m: lib.ln_structured(m, "bias", 1, 2, 0),
        lambda lib, m: lib.random_structured(m, "weight", 1, 4),
    ]
    for case in cases:
        t, j = torch.nn.Linear(4, 3), jnn.Linear(4, 3)
        with pytest.raises(Exception) as expected:
            case(_TorchArrays(), t)
        message = str(expected.value).replace(repr(t), type(t).__name__)  # torch names the module by its repr
        with pytest.raises(expected.type, match=re.escape(message)):
            case(jprune, j)


class _TorchArrays:
    """torch's prune module, its NumPy arguments passed as float32 tensors."""

    def __getattr__(self, name):
        fn = getattr(tprune, name)

        def as_torch(value):
            return torch.from_numpy(value).float() if isinstance(value, np.ndarray) else value

        def call(*args, **kwargs):
            return fn(*map(as_torch, args), **{key: as_torch(value) for key, value in kwargs.items()})

        return call
