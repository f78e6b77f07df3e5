"""TransformerEncoderLayer, TransformerEncoder and TransformerDecoderLayer against torch.nn.

Built after the same seed, the jax layers hold torch's initial weights
(no normal draws in these layers). Measured over these draws: float64
outputs and input gradients <= ~1e-14 relative (bar 1e-10), also in training
mode with dropout, whose masks are torch's; float32 <= ~2e-6 (bar 1e-5).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as nn
import jax_impl.random
from tests._tiers import slow_after
from tests.nn.modules._torch_pair import input_grad, max_state_diff, rel_err, seed_both, torch_input_grad

TOL = {np.float64: 1e-10, np.float32: 1e-5}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}

OPTIONS = [
    dict(),
    dict(norm_first=True, activation="gelu"),
    dict(batch_first=True, bias=False),
    dict(activation=torch.nn.functional.silu),
]


def _jax_options(options):
    out = dict(options)
    if out.get("activation") is torch.nn.functional.silu:
        out["activation"] = nn.functional.silu
    return out


def _encoder_pair(seed, dtype, dropout, options):
    seed_both(seed)
    t_mod = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout, dtype=TORCH_DTYPE[dtype], **options)
    j_mod = nn.TransformerEncoderLayer(8, 2, 16, dropout, dtype=jnp.dtype(dtype), **_jax_options(options))
    return t_mod, j_mod


@pytest.mark.parametrize("dtype", slow_after([np.float64, np.float32]))
@pytest.mark.parametrize("options", slow_after(OPTIONS[::-1]), ids=lambda o: ",".join(map(str, o)) or "default")
def test_encoder_layer_matches_torch(dtype, options):
    rng = np.random.default_rng(0)
    with jax.enable_x64(dtype == np.float64):
        t_mod, j_mod = _encoder_pair(0, dtype, 0.0, options)
        assert max_state_diff(j_mod, t_mod) == 0
        x = rng.standard_normal((3, 5, 8) if options.get("batch_first") else (5, 3, 8)).astype(dtype)
        kpm = np.zeros((3, 5), bool)
        kpm[1, 3:] = True
        mask = np.triu(np.ones((5, 5), bool), 1)
        calls = (dict(), dict(src_key_padding_mask=kpm, src_mask=mask), dict(src_mask=mask, is_causal=True))
        # Jitted: one compilation of the three forwards and their VJPs (eagerly, each op compiles on its own).
        ours = jax.jit(lambda s: [input_grad(lambda v, call=call: j_mod(v, **call), s) for call in calls])(
            jnp.asarray(x))
        for call, (out, (g,)) in zip(calls, ours):
            t_call = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call.items()}
            t_out, (tg,) = torch_input_grad(lambda s: t_mod(s, **t_call), x)
            assert rel_err(out, t_out) <= TOL[dtype]
            assert rel_err(g, tg) <= TOL[dtype]


@pytest.mark.parametrize("norm_first", slow_after([True, False]))
def test_encoder_layer_dropout_uses_torchs_masks(norm_first):
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        t_mod, j_mod = _encoder_pair(1, np.float64, 0.2, dict(norm_first=norm_first))
        x = rng.standard_normal((4, 2, 8))
        seed_both(7)
        # Jitted: one compilation of the forward and its VJP (eagerly, each op of both compiles on its own).
        # The masks then come from the seeded stream through the staged draws, as in a jitted training step
        # (tests/nn/test_dropout_torch_stream.py checks the eager and the staged draws against torch bitwise).
        out, (g,) = jax.jit(lambda s: input_grad(j_mod, s))(jnp.asarray(x))
        torch.manual_seed(7)
        t_out, (tg,) = torch_input_grad(t_mod, x)
        assert rel_err(out, t_out) <= TOL[np.float64]
        assert rel_err(g, tg) <= TOL[np.float64]


@pytest.mark.slow
def test_encoder_copies_the_layer_and_matches_torch():
    rng = np.random.default_rng(2)
    with jax.enable_x64(True):
        t_layer, j_layer = _encoder_pair(2, np.float64, 0.0, dict())
        t_enc = torch.nn.TransformerEncoder(t_layer, 3, norm=torch.nn.LayerNorm(8, dtype=torch.float64),
                                            enable_nested_tensor=False)
        j_enc = nn.TransformerEncoder(j_layer, 3, norm=nn.LayerNorm(8, dtype=jnp.float64))
        assert max_state_diff(j_enc, t_enc) == 0  # every layer a copy of the same initial weights
        x = rng.standard_normal((5, 2, 8))
        out, (g,) = input_grad(j_enc, jnp.asarray(x))
        t_out, (tg,) = torch_input_grad(t_enc, x)
        assert rel_err(out, t_out) <= TOL[np.float64]
        assert rel_err(g, tg) <= TOL[np.float64]


@pytest.mark.slow  # the default tier's time budget: the encoder layer's tests cover the shared attention there
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        seed_both(3)
        t_mod = torch.nn.TransformerDecoderLayer(8, 2, 16, 0.0, dtype=torch.float64, norm_first=norm_first)
        j_mod = nn.TransformerDecoderLayer(8, 2, 16, 0.0, dtype=jnp.float64, norm_first=norm_first)
        assert max_state_diff(j_mod, t_mod) == 0
        tgt, memory = rng.standard_normal((4, 2, 8)), rng.standard_normal((6, 2, 8))
        mask = np.triu(np.ones((4, 4), bool), 1)
        out, grads = input_grad(lambda t, m: j_mod(t, m, tgt_mask=mask), jnp.asarray(tgt), jnp.asarray(memory))
        t_out, t_grads = torch_input_grad(lambda t, m: t_mod(t, m, tgt_mask=torch.tensor(mask)), tgt, memory)
        assert rel_err(out, t_out) <= TOL[np.float64]
        for g, tg in zip(grads, t_grads):
            assert rel_err(g, tg) <= TOL[np.float64]


# --- nn.Transformer and nn.TransformerDecoder ---------------------------------------------------------------------
# Measured over MODEL_OPTIONS x _masks(), dropout 0 and 0.2, outputs and input gradients: float64 <= 4.5e-15
# relative (bar 1e-12); float32 <= 2.4e-6 relative (two layers each side: LayerNorm, softmax and GEMM roundings in
# another summation order than torch's kernels), bar 1e-5.
TIGHT = {np.float64: 1e-12, np.float32: 1e-5}


def _option_id(options: dict) -> str:
    """A test id that names a function by its name: ids must be equal in every pytest-xdist worker."""
    return ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in options.items()) or "defaults"


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield

MODEL_OPTIONS = [
    dict(),
    dict(norm_first=True, batch_first=True, activation="gelu"),
    dict(bias=False, activation=torch.nn.functional.silu),
    dict(batch_first=True, layer_norm_eps=1e-6),
]


def _transformer_pair(seed, dtype, dropout, options, layers=(2, 2)):
    seed_both(seed)
    t_mod = torch.nn.Transformer(8, 2, *layers, 16, dropout, dtype=TORCH_DTYPE[dtype], **options)
    j_mod = nn.Transformer(8, 2, *layers, 16, dropout, dtype=jnp.dtype(dtype), **_jax_options(options))
    return t_mod, j_mod


def _inputs(rng, dtype, batch_first, batch=3, s=5, t=4):
    def seq(n):
        return rng.standard_normal((batch, n, 8) if batch_first else (n, batch, 8)).astype(dtype)

    return seq(s), seq(t)


def _masks(dtype, batch=3, s=5, t=4):
    """The calls compared: torch's causal float mask (is_causal detected, stated, or overruled by padding),
    bool masks, key padding masks of every input, and memory masks with memory_is_causal."""
    causal_t = np.asarray(nn.Transformer.generate_square_subsequent_mask(t, dtype=jnp.dtype(dtype)))
    causal_s = np.triu(np.ones((s, s), bool), 1)
    kpm_s, kpm_t = np.zeros((batch, s), bool), np.zeros((batch, t), bool)
    kpm_s[1, 3:], kpm_t[2, 2:] = True, True
    memory_causal = np.triu(np.ones((t, s), bool), 1)
    return [
        dict(),
        dict(tgt_mask=causal_t),  # torch detects the causal mask (tgt_is_causal=None)
        dict(src_mask=causal_s, src_is_causal=True, tgt_mask=causal_t, tgt_is_causal=True),
        dict(src_key_padding_mask=kpm_s, memory_key_padding_mask=kpm_s, tgt_key_padding_mask=kpm_t,
             tgt_mask=causal_t, tgt_is_causal=True),
        dict(src_mask=causal_s, src_key_padding_mask=kpm_s, memory_mask=memory_causal, memory_is_causal=True),
        dict(memory_key_padding_mask=np.where(kpm_s, -1.5, 0.0).astype(dtype), memory_mask=memory_causal),
    ]


def _torch_call(call):
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call.items()}


def _compare_transformer(j_mod, t_mod, src, tgt, call, tol):
    out, grads = input_grad(lambda s, t: j_mod(s, t, **call), jnp.asarray(src), jnp.asarray(tgt))
    t_out, t_grads = torch_input_grad(lambda s, t: t_mod(s, t, **_torch_call(call)), src, tgt)
    assert rel_err(out, t_out) <= tol
    for g, tg in zip(grads, t_grads):
        assert rel_err(g, tg) <= tol


@pytest.mark.parametrize("seed", slow_after([0, 1]))
@pytest.mark.parametrize("options", slow_after([dict(), dict(norm_first=True, bias=False, batch_first=True)]),
                         ids=str)
def test_transformer_init_matches_torch(seed, options):
    """Default inits, then xavier_uniform_ on every matrix in parameters() order: the same state, and the
    global stream left where torch leaves it."""
    for dtype in (np.float32, np.float64):
        with jax.enable_x64(dtype == np.float64):
            t_mod, j_mod = _transformer_pair(seed, dtype, 0.1, options, layers=(2, 3))
            assert max_state_diff(j_mod, t_mod) == 0
            assert bytes(jax_impl.random.get_rng_state()) == bytes(torch.get_rng_state().numpy())


@pytest.mark.slow
def test_transformer_init_with_custom_encoder_and_decoder():
    """torch redraws the custom parts too, in their registration order."""
    with jax.enable_x64(True):
        seed_both(4)
        t_enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 12, dtype=torch.float64), 2,
                                            enable_nested_tensor=False)
        t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 4, 6, dtype=torch.float64), 1,
                                            norm=torch.nn.LayerNorm(8, dtype=torch.float64))
        t_mod = torch.nn.Transformer(8, 2, custom_encoder=t_enc, custom_decoder=t_dec, dtype=torch.float64)
        j_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 12, dtype=jnp.float64), 2)
        j_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 4, 6, dtype=jnp.float64), 1,
                                      norm=nn.LayerNorm(8, dtype=jnp.float64))
        j_mod = nn.Transformer(8, 2, custom_encoder=j_enc, custom_decoder=j_dec, dtype=jnp.float64)
        assert max_state_diff(j_mod, t_mod) == 0
        # The forward shows that the custom parts run (eval: no dropout draws); gradients through
        # TransformerEncoder/TransformerDecoder are test_encoder_copies_the_layer_and_matches_torch's and
        # test_decoder_copies_the_layer_and_matches_torch's.
        t_mod.eval()
        j_mod.eval()
        rng = np.random.default_rng(4)
        src, tgt = _inputs(rng, np.float64, False)
        call = _masks(np.float64)[3]
        with torch.no_grad():
            t_out = t_mod(torch.tensor(src), torch.tensor(tgt), **_torch_call(call))
        assert rel_err(j_mod(jnp.asarray(src), jnp.asarray(tgt), **call), t_out) <= TIGHT[np.float64]


@pytest.mark.parametrize("dtype", slow_after([np.float64, np.float32]))
@pytest.mark.parametrize("options", slow_after(MODEL_OPTIONS), ids=lambda o: _option_id(o))
def test_transformer_matches_torch(dtype, options):
    rng = np.random.default_rng(5)
    # The default tier's time budget: there one call (every padding mask, the causal flag) with tgt as long as
    # src, so that the decoder reuses the eager kernels its encoder compiled.
    default_tier = options == {} and dtype == np.float64
    t = 5 if default_tier else 4
    calls = _masks(dtype, t=t)
    if default_tier:
        calls = calls[3:4]
    elif dtype == np.float32:
        # float32 runs the plain call and those whose masks hold float32 values (the causal float mask
        # with every padding mask, the float memory padding mask): the boolean masks' logic is
        # dtype-independent, and float64 runs every call (each call compiles its own eager ops).
        calls = [calls[0], calls[3], calls[5]]
    with jax.enable_x64(dtype == np.float64):
        t_mod, j_mod = _transformer_pair(5, dtype, 0.0, options)
        src, tgt = _inputs(rng, dtype, options.get("batch_first", False), t=t)
        for call in calls:
            _compare_transformer(j_mod, t_mod, src, tgt, call, TIGHT[dtype])


@pytest.mark.slow
@pytest.mark.parametrize("options", MODEL_OPTIONS[:2], ids=lambda o: _option_id(o))
def test_transformer_unbatched_matches_torch(x64, options):
    rng = np.random.default_rng(6)
    t_mod, j_mod = _transformer_pair(6, np.float64, 0.0, options)
    src, tgt = rng.standard_normal((5, 8)), rng.standard_normal((4, 8))
    causal = np.asarray(nn.Transformer.generate_square_subsequent_mask(4, dtype=jnp.float64))
    kpm = np.array([False, False, False, True, True])
    for call in (dict(), dict(tgt_mask=causal, src_key_padding_mask=kpm, memory_key_padding_mask=kpm)):
        _compare_transformer(j_mod, t_mod, src, tgt, call, TIGHT[np.float64])


@pytest.mark.slow  # the default tier's time budget: test_encoder_layer_dropout_uses_torchs_masks runs there
@pytest.mark.parametrize("options", [dict(batch_first=True), dict(norm_first=True)], ids=lambda o: _option_id(o))
def test_transformer_dropout_uses_torchs_masks(x64, options):
    """Train mode, dropout 0.2 everywhere (attention weights, residual branches, feed-forward): torch's masks."""
    rng = np.random.default_rng(7)
    t_mod, j_mod = _transformer_pair(7, np.float64, 0.2, options)
    src, tgt = _inputs(rng, np.float64, options.get("batch_first", False))
    call = _masks(np.float64)[3]
    seed_both(8)
    out, grads = input_grad(lambda s, t: j_mod(s, t, **call), jnp.asarray(src), jnp.asarray(tgt))
    torch.manual_seed(8)
    t_out, t_grads = torch_input_grad(lambda s, t: t_mod(s, t, **_torch_call(call)), src, tgt)
    assert rel_err(out, t_out) <= TIGHT[np.float64]
    for g, tg in zip(grads, t_grads):
        assert rel_err(g, tg) <= TIGHT[np.float64]


@pytest.mark.slow
@pytest.mark.parametrize(("norm_first", "batch_first", "dropout"),
                         [(False, False, 0.0), (True, True, 0.0), (False, True, 0.3), (True, False, 0.3)])
def test_decoder_copies_the_layer_and_matches_torch(x64, norm_first, batch_first, dropout):
    rng = np.random.default_rng(9)
    seed_both(9)
    kwargs = dict(norm_first=norm_first, batch_first=batch_first)
    t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, dropout, dtype=torch.float64,
                                                                         **kwargs),
                                        3, norm=torch.nn.LayerNorm(8, dtype=torch.float64))
    j_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout, dtype=jnp.float64, **kwargs), 3,
                                  norm=nn.LayerNorm(8, dtype=jnp.float64))
    assert max_state_diff(j_dec, t_dec) == 0  # every layer a copy of the same initial weights
    memory, tgt = _inputs(rng, np.float64, batch_first)
    masks = _masks(np.float64)
    for call in (masks[1], masks[3], masks[4]):
        call = {k.replace("src_", "unused_"): v for k, v in call.items() if not k.startswith("src_")}
        seed_both(10)
        out, grads = input_grad(lambda t, m: j_dec(t, m, **call), jnp.asarray(tgt), jnp.asarray(memory))
        torch.manual_seed(10)
        t_out, t_grads = torch_input_grad(lambda t, m: t_dec(t, m, **_torch_call(call)), tgt, memory)
        assert rel_err(out, t_out) <= TIGHT[np.float64]
        for g, tg in zip(grads, t_grads):
            assert rel_err(g, tg) <= TIGHT[np.float64]


def test_decoder_without_norm_and_state_keys():
    seed_both(11)
    t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(4, 1, 8), 2)
    j_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 1, 8), 2)
    assert max_state_diff(j_dec, t_dec) == 0 and j_dec.norm is None and j_dec.num_layers == 2
    assert "layers.1.multihead_attn.in_proj_weight" in t_dec.state_dict()


@pytest.mark.parametrize("sz", [1, 4])
def test_generate_square_subsequent_mask(x64, sz):
    for j_dtype, t_dtype in ((None, None), (jnp.float64, torch.float64)):
        mine = nn.Transformer.generate_square_subsequent_mask(sz, dtype=j_dtype)
        theirs = torch.nn.Transformer.generate_square_subsequent_mask(sz, dtype=t_dtype)
        assert mine.dtype == jnp.dtype(str(theirs.dtype).removeprefix("torch."))
        np.testing.assert_array_equal(np.asarray(mine), theirs.numpy())


def test_transformer_shape_errors_are_torchs():
    seed_both(12)
    t_mod, j_mod = torch.nn.Transformer(4, 1, 1, 1, 8), nn.Transformer(4, 1, 1, 1, 8)
    for src_shape, tgt_shape in (((3, 2, 4), (3, 5, 4)), ((3, 2, 4), (3, 2, 6))):
        with pytest.raises(RuntimeError) as expected:
            t_mod(torch.zeros(src_shape), torch.zeros(tgt_shape))
        with pytest.raises(RuntimeError, match=str(expected.value)):
            j_mod(jnp.zeros(src_shape), jnp.zeros(tgt_shape))


@pytest.mark.slow
def test_transformer_against_torchs_eval_fast_path(x64):
    """torch's eval fast path (batch_first, no gradient, src_key_padding_mask: nested tensors and
    _transformer_encoder_layer_fwd) zeroes the memory's padded rows; a decoder that masks them with the same
    padding never reads them, so the outputs agree to rounding (measured ~1e-15 relative)."""
    rng = np.random.default_rng(13)
    t_mod, j_mod = _transformer_pair(13, np.float64, 0.1, dict(batch_first=True))
    t_mod.eval()
    j_mod.eval()
    src, tgt = _inputs(rng, np.float64, True)
    call = _masks(np.float64)[3]
    with torch.no_grad():
        t_out = t_mod(torch.tensor(src), torch.tensor(tgt), **_torch_call(call))
    assert rel_err(j_mod(jnp.asarray(src), jnp.asarray(tgt), **call), t_out) <= TIGHT[np.float64]
