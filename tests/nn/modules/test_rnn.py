"""RNN, LSTM, GRU and their cells against torch: the same seed gives the same weights, forward and backward
agree over a seeded grid of options, dropout between layers uses torch's masks.

Tolerances: float64 forward and gradients within 1e-12 of torch (measured at most 3.9e-16: the sides differ
only in the order of float64 sums inside the matrix products); float32 within 2e-6 relative to the largest
value (torch's CPU cells against XLA's in float32; measured at most 3.1e-7 over a sequence of 7).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.nn as jnn
import jax_impl.random as jr
from parity.convert import to_torch_state_dict

_GRID = [  # (class, kwargs): every option at least once
    ("RNN", {"num_layers": 2, "nonlinearity": "relu"}),
    ("RNN", {"bidirectional": True, "batch_first": True}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 3, "batch_first": True}),
    ("LSTM", {"bias": False, "num_layers": 3}),
    ("GRU", {"num_layers": 2, "batch_first": True, "bidirectional": True}),
    ("GRU", {"bias": False}),
]


def _pair(name, kwargs, torch_dtype, np_dtype, seed=0):
    torch.manual_seed(seed)
    theirs = getattr(torch.nn, name)(5, 6, dtype=torch_dtype, **kwargs)
    jr.manual_seed(seed)
    ours = getattr(jnn, name)(5, 6, dtype=np_dtype, **kwargs)
    return theirs, ours


@pytest.mark.parametrize(("name", "kwargs"), _GRID)
@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), [
    (np.float64, torch.float64, 1e-12),
    # float32 repeats the float64 grid at float32's rounding: the slow tier pays for it.
    pytest.param(np.float32, torch.float32, 2e-6, marks=pytest.mark.slow)], ids=["float64", "float32"])
def test_recurrent_layers_match_torch(name, kwargs, np_dtype, torch_dtype, tol):
    with jax.enable_x64(np_dtype == np.float64):
        theirs, ours = _pair(name, kwargs, torch_dtype, np_dtype)
        state = to_torch_state_dict(ours)
        assert sorted(state) == sorted(theirs.state_dict())  # torch's names (equal values below: its init order)
        for k, v in theirs.state_dict().items():
            assert torch.equal(state[k], v), k  # torch's init numbers after the same seed
        rng = np.random.default_rng(1)
        shape = (3, 7, 5) if kwargs.get("batch_first") else (7, 3, 5)
        x = rng.standard_normal(shape).astype(np_dtype)
        t_x = torch.tensor(x, requires_grad=True)
        t_out, t_h = theirs(t_x)
        t_hs = t_h if isinstance(t_h, tuple) else (t_h,)
        weights = [rng.standard_normal(tuple(t.shape)) for t in (t_out, *t_hs)]
        (sum((t * torch.tensor(w, dtype=torch_dtype)).sum() for t, w in zip((t_out, *t_hs), weights))).backward()

        from flax import nnx

        graphdef, params = nnx.split(ours, nnx.Param)

        def loss(p, x):
            out, h = nnx.merge(graphdef, p)(x)
            hs = h if isinstance(h, tuple) else (h,)
            return sum(jnp.sum(a * jnp.asarray(w, np_dtype)) for a, w in zip((out, *hs), weights)), (out, hs)

        (_, (out, hs)), (g_params, g_x) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
            params, jnp.asarray(x))

        def close(a, b, what):
            b = b.detach().numpy()
            scale = max(1.0, float(np.abs(b).max()))
            np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=tol * scale, err_msg=what)

        close(out, t_out, "output")
        for i, (a, b) in enumerate(zip(hs, t_hs)):
            close(a, b, f"h_n[{i}]")
        close(g_x, t_x.grad, "input grad")
        nnx.update(ours, g_params)
        grads = to_torch_state_dict(ours)
        for k, p in theirs.named_parameters():
            close(grads[k], p.grad, f"{k} grad")


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_initial_state_unbatched_input_and_dropout_between_layers(name):
    """``hx`` given, an unbatched ``(L, H_in)`` input, and ``dropout`` between three layers in training (torch's
    masks from the global stream: equal outputs and equal generator states after)."""
    with jax.enable_x64(True):
        theirs, ours = _pair(name, {"num_layers": 3, "dropout": 0.4}, torch.float64, np.float64, seed=4)
        rng = np.random.default_rng(2)
        x = rng.standard_normal((6, 5))
        h0 = rng.standard_normal((3, 6))
        hx_t = (torch.tensor(h0), torch.tensor(h0 * 0.5)) if name == "LSTM" else torch.tensor(h0)
        hx_j = (jnp.asarray(h0), jnp.asarray(h0 * 0.5)) if name == "LSTM" else jnp.asarray(h0)
        torch.manual_seed(9)
        jr.manual_seed(9)
        t_out, _ = theirs(torch.tensor(x), hx_t)
        # Jitted: one compilation per mode (eagerly, each op compiles on its own). The masks then come from
        # the global stream through the staged draws, as in a jitted training step
        # (tests/nn/test_dropout_torch_stream.py checks the eager and the staged draws against torch bitwise).
        call = nnx.jit(lambda m, x, hx: m(x, hx)[0])
        out = call(ours, jnp.asarray(x), hx_j)
        np.testing.assert_allclose(np.asarray(out), t_out.detach().numpy(), rtol=0, atol=1e-12)
        assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())
        ours.eval()
        theirs.eval()
        np.testing.assert_allclose(np.asarray(call(ours, jnp.asarray(x), hx_j)),
                                   theirs(torch.tensor(x), hx_t)[0].detach().numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(name):
    with jax.enable_x64(True):
        torch.manual_seed(3)
        theirs = getattr(torch.nn, name)(4, 5, dtype=torch.float64)
        jr.manual_seed(3)
        ours = getattr(jnn, name)(4, 5, dtype=np.float64)
        for k, v in theirs.state_dict().items():
            assert torch.equal(to_torch_state_dict(ours)[k], v), k
        x = np.random.default_rng(0).standard_normal((2, 4))
        h = None
        t_h = None
        # Jitted: one compilation per input structure (eagerly, each op compiles on its own).
        step = nnx.jit(lambda m, x, h: m(x, h))
        for _ in range(3):  # a time loop as the examples write it (LSTMCell in time-sequence prediction)
            t_h = theirs(torch.tensor(x), t_h)
            h = step(ours, jnp.asarray(x), h)
        for a, b in zip(h if isinstance(h, tuple) else (h,), t_h if isinstance(t_h, tuple) else (t_h,)):
            np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=0, atol=1e-12)
        single = nnx.jit(lambda m, x: m(x))(ours, jnp.asarray(x[0]))
        t_single = theirs(torch.tensor(x[0]))
        np.testing.assert_allclose(np.asarray(single[0] if isinstance(single, tuple) else single),
                                   (t_single[0] if isinstance(t_single, tuple) else t_single).detach().numpy(),
                                   rtol=0, atol=1e-12)


def test_constructor_errors_are_torchs():
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        jnn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        jnn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        jnn.RNN(3, 0)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        jnn.RNN(3, 4, nonlinearity="gelu")
    with pytest.warns(UserWarning, match="dropout option adds dropout after all but last recurrent layer"):
        jnn.LSTM(3, 4, dropout=0.2)
