"""jax_impl's oneDNN LSTM route (jax_impl/nn/_lstm_onednn.py) against torch's float32 CPU ``nn.LSTM``.

torch runs a float32 CPU LSTM through oneDNN's LSTM primitive, layer by
layer (``mkldnn_rnn_layer``), its bias ``b_ih + b_hh`` summed first; so does
the route. Measured on the grid below: the outputs, final states and input
gradients bit for bit torch's; the weight and bias gradients (the batch cut
into a part per core here, summed by one OpenMP team in torch) within
7.8e-7 of their largest magnitude; bound 1e-5. Dropout between layers uses
torch's masks (tests/nn/modules/test_rnn.py); forward-mode derivatives are
left to the ``lax.scan`` (``mkldnn`` disabled), compared here with the route.
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
from jax_impl.backends import mkldnn
from parity.convert import to_torch_state_dict
from tests._cpu import AVX512

pytestmark = pytest.mark.skipif(not mkldnn.is_available(), reason="oneDNN (onednn-cpu-gomp) is not installed")

# (input size, hidden, kwargs, (T, N) of the input): the word-language-model example's layer, then options
_GRID = [
    (64, 64, {"num_layers": 2}, (35, 32)),
    (5, 6, {"bidirectional": True}, (7, 3)),
    (5, 6, {"bias": False, "batch_first": True}, (7, 3)),
    (8, 16, {"num_layers": 2, "bidirectional": True}, (4, 1)),
]


def _pair(c, h, kwargs, seed=0):
    torch.manual_seed(seed)
    theirs = torch.nn.LSTM(c, h, **kwargs)
    jr.manual_seed(seed)
    return theirs, jnn.LSTM(c, h, **kwargs)


def _run(ours, x, weights):
    graphdef, params = nnx.split(ours, nnx.Param)

    def loss(p, a):
        out, (h, c) = nnx.merge(graphdef, p)(a)
        return sum(jnp.sum(v * jnp.asarray(w)) for v, w in zip((out, h, c), weights)), (out, h, c)

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    (_, outs), (g_params, g_x) = fn(params, jnp.asarray(x))
    nnx.update(ours, g_params)
    return outs, g_x, to_torch_state_dict(ours), str(fn.lower(params, jnp.asarray(x)).as_text())


@pytest.mark.parametrize("case", _GRID, ids=[f"case{i}" for i in range(len(_GRID))])
def test_float32_lstm_is_torchs_bit_for_bit(case):
    c, h, kwargs, (t, n) = case
    theirs, ours = _pair(c, h, kwargs)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, t, c) if kwargs.get("batch_first") else (t, n, c)).astype(np.float32)
    t_x = torch.tensor(x, requires_grad=True)
    t_out, (t_h, t_c) = theirs(t_x)
    weights = [rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in (t_out, t_h, t_c)]
    sum((v * torch.tensor(w)).sum() for v, w in zip((t_out, t_h, t_c), weights)).backward()
    (out, h_n, c_n), g_x, grads, text = _run(ours, x, weights)
    assert "jax_impl_onednn_lstm_forward" in text and "jax_impl_onednn_lstm_backward" in text
    for ours_, ref in ((out, t_out), (h_n, t_h), (c_n, t_c), (g_x, t_x.grad)):
        ref = ref.detach().numpy()
        if AVX512:
            np.testing.assert_array_equal(np.asarray(ours_), ref)
        else:  # other oneDNN GEMM blocking on AVX2 (tests/_cpu.py): the weight gradients' bound below
            assert np.abs(np.asarray(ours_) - ref).max() <= 1e-5 * np.abs(ref).max()
    for k, p in theirs.named_parameters():
        ref = p.grad.numpy()
        assert np.abs(np.asarray(grads[k]) - ref).max() <= 1e-5 * np.abs(ref).max(), k


def test_inference_is_torchs_and_mkldnn_off_runs_the_scan():
    """In eval, without gradients, the inference primitive (torch's ``forward_inference``) gives torch's
    output bit for bit; with ``mkldnn.flags(enabled=False)`` the scan runs: measured 3.9e-7 of the
    largest magnitude from torch (its own GEMM and activations in another order), bound 1e-5."""
    theirs, ours = _pair(16, 32, {"num_layers": 2})
    theirs.eval()
    ours.eval()
    x = np.random.default_rng(3).standard_normal((9, 4, 16)).astype(np.float32)
    with torch.no_grad():
        want = theirs(torch.tensor(x))[0].numpy()
    graphdef, state = nnx.split(ours)

    def forward():  # a new function each call: jit's cache does not see mkldnn's flag
        return jax.jit(lambda s, a: nnx.merge(graphdef, s)(a)[0])

    fn = forward()
    assert "jax_impl_onednn_lstm_inference" in fn.lower(state, x).as_text()
    np.testing.assert_array_equal(np.asarray(fn(state, x)), want)
    with mkldnn.flags(enabled=False):
        fn = forward()
        assert "onednn" not in fn.lower(state, x).as_text()
        assert np.abs(np.asarray(fn(state, x)) - want).max() <= 1e-5 * np.abs(want).max()


def test_vmap_and_a_gradient_of_the_states_alone():
    """vmap over a batch of sequences (the custom calls run one by one) and a loss of the final cell state
    only (the output's gradient a zero array for oneDNN), against the scan. Measured at most 2.0e-7;
    bound 1e-5."""
    _, ours = _pair(6, 8, {})
    graphdef, params = nnx.split(ours, nnx.Param)
    xs = jnp.asarray(np.random.default_rng(4).standard_normal((3, 5, 2, 6)).astype(np.float32))

    def results():
        def run():
            out = jax.vmap(lambda a: nnx.merge(graphdef, params)(a)[0])(xs)
            grad = jax.grad(lambda p: jnp.sum(nnx.merge(graphdef, p)(xs[0])[1][1] ** 2))(params)
            return out, jax.tree.leaves(grad)

        return jax.jit(run)

    assert "onednn" in results().lower().as_text()
    ours_ = results()()
    with mkldnn.flags(enabled=False):
        refs = results()()
    for a, b in zip(jax.tree.leaves(ours_), jax.tree.leaves(refs)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * max(np.abs(b).max(), 1e-30)
