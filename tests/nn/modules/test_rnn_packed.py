"""RNN, LSTM, GRU on ``PackedSequence`` inputs against torch's packed kernels.

Each case packs a seeded padded batch with seeded lengths on both sides (``enforce_sorted`` True: lengths
sorted; False: shuffled, with ties), runs the layer (with or without ``hx``), pads the packed output back and
backpropagates one seeded weighting of the output and the final states, into the padded input, ``hx`` and
every parameter.

Tolerances: float64 within 1e-12 of torch relative to max(1, largest value), forward and gradients (measured
at most 1.5e-15 over the whole grid, gradients of the 2-layer bidirectional LSTM: the two sides' matrix
products sum in different orders, and XLA's tanh / sigmoid differ from torch's by an ulp); float32 within
2e-6 (measured at most 3.6e-7 over the grid, the same two causes at float32's rounding).

Bitwise: with products that are exact in any summation order (dyadic inputs, one power-of-two entry per row
of every recurrent and later-layer weight), the relu RNN, which has no transcendental left, gives torch's
packed outputs and states bit for bit in float64 and float32: the masked scan is the per-element arithmetic
of torch's packed kernel (which runs the cell on the first ``batch_sizes[t]`` rows at step ``t``). The other
cells cannot be bitwise: XLA's tanh / sigmoid differ from torch's by an ulp on about half of all inputs, and
XLA contracts ``f * c + i * g`` into fused multiply-adds depending on the shape it vectorises.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from torch.nn.utils import rnn as torch_rnn

import jax_impl.nn as jnn
import jax_impl.random as jr
from jax_impl.nn.utils import rnn as jax_rnn
from parity.convert import to_torch_state_dict

_GRID = [  # (class, kwargs): every option at least once, each with and without hx and both enforce_sorted
    ("RNN", {"nonlinearity": "tanh", "num_layers": 2}),
    ("RNN", {"nonlinearity": "relu", "bidirectional": True, "batch_first": True}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 3, "batch_first": True, "bidirectional": True}),
    ("LSTM", {"bias": False}),
    ("GRU", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {}),
]
# The default tier: the LSTM with projections, bidirectional, batch_first, unsorted with hx (c_n, both
# permutations, hx gradients); the relu RNN and the GRU run in the default tier below, the rest in the slow one.
_FAST = {("LSTM", 3, False, True)}
_T, _B, _H_IN, _H = 6, 5, 4, 5


def _pair(name, kwargs, torch_dtype, np_dtype, seed=0):
    torch.manual_seed(seed)
    theirs = getattr(torch.nn, name)(_H_IN, _H, dtype=torch_dtype, **kwargs)
    jr.manual_seed(seed)
    ours = getattr(jnn, name)(_H_IN, _H, dtype=np_dtype, **kwargs)
    return theirs, ours


def _lengths(rng, enforce_sorted):
    lengths = rng.integers(1, _T + 1, _B)
    lengths[rng.integers(_B)] = _T  # the longest fills the padded length, as pad_sequence makes it
    lengths[rng.integers(_B)] = lengths[rng.integers(_B)]  # a tie at times, to check the stable sort
    return np.sort(lengths)[::-1].copy() if enforce_sorted else lengths


def _states(h):
    return h if isinstance(h, tuple) else (h,)


def _cases():
    for index, (name, kwargs) in enumerate(_GRID):
        for enforce_sorted in (True, False):
            for with_hx in (False, True):
                fast = (name, index, enforce_sorted, with_hx) in _FAST
                if not fast and enforce_sorted == with_hx:
                    continue  # the slow tier: sorted without hx and unsorted with hx, for CI's time budget
                yield pytest.param(name, kwargs, enforce_sorted, with_hx, marks=() if fast else pytest.mark.slow,
                                   id=f"{name}{index}-{'sorted' if enforce_sorted else 'unsorted'}"
                                      f"-{'hx' if with_hx else 'nohx'}")


def _check(name, kwargs, enforce_sorted, with_hx, np_dtype, torch_dtype, tol):
    theirs, ours = _pair(name, kwargs, torch_dtype, np_dtype)
    batch_first = kwargs.get("batch_first", False)
    rng = np.random.default_rng(len(name) * 100 + len(kwargs) * 10 + enforce_sorted * 2 + with_hx)
    lengths = _lengths(rng, enforce_sorted)
    x = rng.standard_normal((_B, _T, _H_IN) if batch_first else (_T, _B, _H_IN)).astype(np_dtype)
    layers = theirs.num_layers * (2 if theirs.bidirectional else 1)
    real_hidden = theirs.proj_size or _H
    hx = None
    if with_hx:
        hx = [rng.standard_normal((layers, _B, real_hidden)).astype(np_dtype)]
        hx += [rng.standard_normal((layers, _B, _H)).astype(np_dtype)] if name == "LSTM" else []

    t_x = torch.tensor(x, requires_grad=True)
    t_hx = None if hx is None else [torch.tensor(h, requires_grad=True) for h in hx]
    packed = torch_rnn.pack_padded_sequence(t_x, torch.tensor(lengths), batch_first, enforce_sorted)
    t_out, t_h = theirs(packed, None if t_hx is None else (tuple(t_hx) if name == "LSTM" else t_hx[0]))
    t_padded, t_lengths = torch_rnn.pad_packed_sequence(t_out, batch_first)
    results = (t_padded, *_states(t_h))
    weights = [rng.standard_normal(tuple(t.shape)) for t in results]
    sum((t * torch.tensor(w, dtype=torch_dtype)).sum() for t, w in zip(results, weights)).backward()

    graphdef, params = nnx.split(ours, nnx.Param)

    def loss(p, x, hx):
        packed = jax_rnn.pack_padded_sequence(x, lengths, batch_first, enforce_sorted)
        out, h = nnx.merge(graphdef, p)(packed, None if hx is None else (tuple(hx) if name == "LSTM" else hx[0]))
        padded, _ = jax_rnn.pad_packed_sequence(out, batch_first)
        outs = (padded, *_states(h))
        return sum(jnp.sum(a * jnp.asarray(w, np_dtype)) for a, w in zip(outs, weights)), (out, outs)

    (_, (out, outs)), (g_params, g_x, g_hx) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(
        params, jnp.asarray(x), None if hx is None else [jnp.asarray(h) for h in hx])

    worst = {}

    def close(a, b, what):
        b = b.detach().numpy()
        assert np.shape(a) == b.shape, what
        scale = max(1.0, float(np.abs(b).max()))
        worst[what] = float(np.abs(np.asarray(a) - b).max()) / scale
        np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=tol * scale, err_msg=what)

    assert isinstance(out, jax_rnn.PackedSequence)
    np.testing.assert_array_equal(out.batch_sizes, t_out.batch_sizes.numpy())
    for ours_index, theirs_index in ((out.sorted_indices, t_out.sorted_indices),
                                     (out.unsorted_indices, t_out.unsorted_indices)):
        assert (ours_index is None) == (theirs_index is None)
        if ours_index is not None:
            np.testing.assert_array_equal(ours_index, theirs_index.numpy())
    close(out.data, t_out.data, "packed output")
    for i, (a, b) in enumerate(zip(outs, results)):
        close(a, b, ["padded output", "h_n", "c_n"][i])
    close(g_x, t_x.grad, "input grad")
    for i, (a, b) in enumerate(zip(g_hx or [], t_hx or [])):
        close(a, b.grad, f"hx[{i}] grad")
    nnx.update(ours, g_params)
    grads = to_torch_state_dict(ours)
    for k, p in theirs.named_parameters():
        close(grads[k], p.grad, f"{k} grad")
    return worst


@pytest.mark.parametrize(("name", "kwargs", "enforce_sorted", "with_hx"), list(_cases()))
def test_packed_float64_matches_torch(name, kwargs, enforce_sorted, with_hx):
    with jax.enable_x64(True):
        _check(name, kwargs, enforce_sorted, with_hx, np.float64, torch.float64, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kwargs"), _GRID)
def test_packed_float32_matches_torch(name, kwargs):
    _check(name, kwargs, False, True, np.float32, torch.float32, 2e-6)


def _exact_weights(theirs, ours, rng):
    """Weights whose products are exact in any summation order: dyadic first-layer input weights and biases;
    every recurrent, projection and later-layer input weight with one power-of-two entry per row."""
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            if name.startswith(("weight_hh", "weight_hr")) or (name.startswith("weight_ih") and "_l0" not in name):
                w = torch.zeros_like(p)
                w[np.arange(p.shape[0]), rng.integers(0, p.shape[1], p.shape[0])] = torch.tensor(
                    rng.choice([-1.0, -0.5, 0.25, 0.5, 1.0], p.shape[0]), dtype=p.dtype)
                p.copy_(w)
            else:
                p.copy_(torch.tensor(rng.integers(-8, 9, p.shape) / 16, dtype=p.dtype))
    for key, value in theirs.state_dict().items():
        getattr(ours, key)[...] = jnp.asarray(value.numpy())


@pytest.mark.parametrize(("np_dtype", "torch_dtype"), [
    (np.float64, torch.float64), pytest.param(np.float32, torch.float32, marks=pytest.mark.slow)],
    ids=["float64", "float32"])
def test_relu_rnn_with_exact_products_is_torch_bitwise(np_dtype, torch_dtype):
    with jax.enable_x64(np_dtype == np.float64):
        theirs, ours = _pair("RNN", {"nonlinearity": "relu", "bidirectional": True}, torch_dtype,
                             np_dtype)
        rng = np.random.default_rng(7)
        _exact_weights(theirs, ours, rng)
        x = (rng.integers(-8, 9, (_T, _B, _H_IN)) / 8).astype(np_dtype)
        h0 = (rng.integers(-8, 9, (2, _B, _H)) / 8).astype(np_dtype)
        lengths = [3, 6, 1, 4, 6]
        t_out, t_h = theirs(torch_rnn.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False),
                            torch.tensor(h0))
        out, h = ours(jax_rnn.pack_padded_sequence(x, lengths, enforce_sorted=False), jnp.asarray(h0))
        np.testing.assert_array_equal(np.asarray(out.data), t_out.data.detach().numpy())
        np.testing.assert_array_equal(np.asarray(h), t_h.detach().numpy())


@pytest.mark.parametrize(("name", "num_layers"), [("GRU", 2), pytest.param("LSTM", 3, marks=pytest.mark.slow)])
def test_dropout_between_layers_uses_torchs_masks_on_packed_rows(name, num_layers):
    """torch drops out the packed rows between layers: equal outputs and equal generator states after."""
    with jax.enable_x64(True):
        theirs, ours = _pair(name, {"num_layers": num_layers, "dropout": 0.4, "bidirectional": True},
                             torch.float64, np.float64, seed=4)
        rng = np.random.default_rng(2)
        x = rng.standard_normal((_T, _B, _H_IN))
        lengths = [4, 6, 2, 6, 1]
        torch.manual_seed(9)
        jr.manual_seed(9)
        t_out, t_h = theirs(torch_rnn.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False))
        out, h = ours(jax_rnn.pack_padded_sequence(x, lengths, enforce_sorted=False))
        np.testing.assert_allclose(np.asarray(out.data), t_out.data.detach().numpy(), rtol=0, atol=1e-12)
        for a, b in zip(_states(h), _states(t_h)):
            np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=0, atol=1e-12)
        assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def test_packed_input_under_jit_and_errors_are_torchs():
    theirs, ours = _pair("GRU", {}, torch.float32, np.float32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((_T, 3, _H_IN)).astype(np.float32)
    packed = jax_rnn.pack_padded_sequence(x, [1, 6, 3], enforce_sorted=False)
    # torch permutes hx by sorted_indices before checking its size: unsorted, a wider hx passes (its columns
    # past the batch unused). A PackedSequence is a pytree with data as its only leaf: the layout stays
    # static under jit.
    wide = rng.standard_normal((1, 4, _H)).astype(np.float32)
    out, h = nnx.jit(lambda m, p, h: m(p, h))(ours, packed, jnp.asarray(wide))
    t_out, t_h = theirs(torch_rnn.pack_padded_sequence(torch.tensor(x), [1, 6, 3], enforce_sorted=False),
                        torch.tensor(wide))
    np.testing.assert_allclose(np.asarray(out.data), t_out.data.detach().numpy(), rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(h), t_h.detach().numpy(), rtol=0, atol=2e-6)
    np.testing.assert_array_equal(out.unsorted_indices, t_out.unsorted_indices.numpy())
    with pytest.raises(ValueError, match="must be concrete host values"):
        jax.jit(lambda x, n: jax_rnn.pack_padded_sequence(x, n))(x, jnp.array([6, 3, 1]))
    t_sorted = torch_rnn.pack_padded_sequence(torch.tensor(x), [6, 3, 1])
    for bad_hx in (wide, np.zeros((1, 3), np.float32)):  # sorted, the wider hx is refused
        with pytest.raises(RuntimeError) as theirs_error:
            theirs(t_sorted, torch.tensor(bad_hx))
        with pytest.raises(RuntimeError) as ours_error:
            ours(jax_rnn.pack_padded_sequence(x, [6, 3, 1]), jnp.asarray(bad_hx))
        assert str(ours_error.value) == str(theirs_error.value)
    lstm = jnn.LSTM(_H_IN, _H)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(1, 3, 5\), got \[1, 2, 5\]"):
        lstm(jax_rnn.pack_padded_sequence(x, [6, 3, 1]), (jnp.zeros((1, 3, _H)), jnp.zeros((1, 2, _H))))
    with pytest.raises(RuntimeError, match="INDICES element is out of DATA bounds, id=2 axis_dim=2"):
        lstm(packed, (jnp.zeros((1, 3, _H)), jnp.zeros((1, 2, _H))))  # torch's index_select of hx[1]
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 4, got 3"):
        ours(jax_rnn.pack_padded_sequence(x[..., :3], [6, 3, 1]))
    with pytest.raises(RuntimeError, match="input must have 2 dimensions, got 3"):
        ours(jax_rnn.PackedSequence(jnp.zeros((10, 2, _H_IN)), packed.batch_sizes))
