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
from tests.nn.modules._torch_pair import input_grad, max_state_diff, rel_err, seed_both, torch_input_grad

TOL = {np.float64: 1e-10, np.float32: 1e-5}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}

OPTIONS = [
    dict(),
    dict(norm_first=True, activation="gelu"),
    dict(batch_first=True, bias=False),
    dict(activation=torch.nn.functional.silu),
]


def _default_first(values):
    """The first value runs in the default tier, the rest in the slow tier (the default tier's time budget)."""
    return [v if i == 0 else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]


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


@pytest.mark.parametrize("dtype", _default_first([np.float64, np.float32]))
@pytest.mark.parametrize("options", _default_first(OPTIONS[::-1]), ids=lambda o: ",".join(map(str, o)) or "default")
def test_encoder_layer_matches_torch(dtype, options):
    rng = np.random.default_rng(0)
    with jax.enable_x64(dtype == np.float64):
        t_mod, j_mod = _encoder_pair(0, dtype, 0.0, options)
        assert max_state_diff(j_mod, t_mod) == 0
        x = rng.standard_normal((3, 5, 8) if options.get("batch_first") else (5, 3, 8)).astype(dtype)
        kpm = np.zeros((3, 5), bool)
        kpm[1, 3:] = True
        mask = np.triu(np.ones((5, 5), bool), 1)
        for call in (dict(), dict(src_key_padding_mask=kpm, src_mask=mask), dict(src_mask=mask, is_causal=True)):
            t_call = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call.items()}
            out, (g,) = input_grad(lambda s: j_mod(s, **call), jnp.asarray(x))
            t_out, (tg,) = torch_input_grad(lambda s: t_mod(s, **t_call), x)
            assert rel_err(out, t_out) <= TOL[dtype]
            assert rel_err(g, tg) <= TOL[dtype]


@pytest.mark.parametrize("norm_first", _default_first([True, False]))
def test_encoder_layer_dropout_uses_torchs_masks(norm_first):
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        t_mod, j_mod = _encoder_pair(1, np.float64, 0.2, dict(norm_first=norm_first))
        x = rng.standard_normal((4, 2, 8))
        seed_both(7)
        out, (g,) = input_grad(j_mod, jnp.asarray(x))
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
