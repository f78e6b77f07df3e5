"""MultiheadAttention and F.scaled_dot_product_attention against torch: init, forward, input gradients, dropout.

Measured over these draws: float64 outputs, attention weights and input
gradients <= ~1e-15 relative to the largest magnitude (bar 1e-10); with
dropout the masks are torch's own (drawn from the same global stream), so
training-mode outputs agree to the same rounding.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as nn
import jax_impl.nn.functional as F
from tests._tiers import slow_after
from tests.nn.modules._torch_pair import (
    input_grad,
    load_state,
    max_state_diff,
    rel_err,
    seed_both,
    torch_input_grad,
)

TOL = 1e-10


def _mha_pair(seed, **kwargs):
    seed_both(seed)
    t_mod = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64, **kwargs)
    j_mod = nn.MultiheadAttention(8, 2, dtype=jnp.float64, **kwargs)
    return t_mod, j_mod


def _masks(rng, kind, n, L, S, heads=2):
    kpm = attn = None
    if "kpm" in kind:
        kpm = rng.random((n, S)) < 0.3
        kpm[:, 0] = False  # no fully padded row in the weighted path (NaN rows are checked separately)
        kpm = kpm if "bool" in kind else np.where(kpm, -1.5, 0.0)
    if "attn2" in kind:
        attn = np.triu(np.ones((L, S), bool), 1)
        attn = attn if "bool" in kind else np.where(attn, -np.inf, 0.0)
    if "attn3" in kind:
        attn = rng.standard_normal((n * heads, L, S))
    return kpm, attn


def _check_mha(t_mod, j_mod, q, k, v, **call):
    t_call = {key: torch.tensor(val) if isinstance(val, np.ndarray) else val for key, val in call.items()}

    def j_fn(q, k, v):
        out, w = j_mod(q, k, v, **call)
        return out if w is None else jnp.concatenate([out.reshape(-1), w.reshape(-1)])

    def t_fn(q, k, v):
        out, w = t_mod(q, k, v, **t_call)
        return out if w is None else torch.cat([out.reshape(-1), w.reshape(-1)])

    out, grads = input_grad(j_fn, jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
    t_out, t_grads = torch_input_grad(t_fn, q, k, v)
    assert rel_err(out, t_out) <= TOL
    for g, tg in zip(grads, t_grads):
        assert rel_err(g, tg) <= TOL


MHA_OPTIONS = [dict(), dict(bias=False), dict(kdim=3, vdim=5), dict(add_bias_kv=True), dict(add_zero_attn=True),
               dict(batch_first=True)]
MASKS = ["", "kpm_bool", "kpm_float", "attn2_bool", "attn2_float", "attn3", "kpm_bool_attn2_bool"]


@pytest.mark.parametrize("options", slow_after(MHA_OPTIONS), ids=lambda o: ",".join(o) or "default")
def test_mha_init_and_forward_match_torch(options):
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        t_mod, j_mod = _mha_pair(0, **options)
        if not options.get("add_bias_kv"):
            # out_proj's Linear draws, then xavier_uniform_: torch's numbers (bias_k/bias_v are normal draws).
            assert max_state_diff(j_mod, t_mod) == 0
        load_state(j_mod, t_mod)
        n, L, S = 3, 4, 5
        lead = (lambda a, b: (b, a, -1)) if options.get("batch_first") else (lambda a, b: (a, b, -1))
        q = rng.standard_normal((L, n, 8)).reshape(lead(L, n)[:2] + (8,))
        k = rng.standard_normal(lead(S, n)[:2] + (options.get("kdim", 8),))
        v = rng.standard_normal(lead(S, n)[:2] + (options.get("vdim", 8),))
        for kind, need_weights in itertools.product(["", "kpm_bool_attn2_bool"], (True, False)):
            kpm, attn = _masks(rng, kind, n, L, S)
            _check_mha(t_mod, j_mod, q, k, v, key_padding_mask=kpm, attn_mask=attn, need_weights=need_weights)


@pytest.mark.slow  # the default tier's time budget; test_mha_init_and_forward_match_torch runs there
@pytest.mark.parametrize("kind", MASKS[::-1])
def test_mha_masks_match_torch(kind):
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        t_mod, j_mod = _mha_pair(1)
        load_state(j_mod, t_mod)
        x = rng.standard_normal((5, 2, 8))
        kpm, attn = _masks(rng, kind, 2, 5, 5)
        for need_weights, average in ((True, True), (True, False), (False, True)):
            _check_mha(t_mod, j_mod, x, x, x, key_padding_mask=kpm, attn_mask=attn, need_weights=need_weights,
                       average_attn_weights=average)


@pytest.mark.slow
def test_mha_unbatched_and_causal_hint_match_torch():
    rng = np.random.default_rng(2)
    with jax.enable_x64(True):
        t_mod, j_mod = _mha_pair(2)
        load_state(j_mod, t_mod)
        x = rng.standard_normal((4, 8))
        causal = np.triu(np.ones((4, 4), bool), 1)
        _check_mha(t_mod, j_mod, x, x, x, attn_mask=causal)
        _check_mha(t_mod, j_mod, x, x, x, attn_mask=causal, need_weights=False, is_causal=True)
        _check_mha(t_mod, j_mod, x, x, x, key_padding_mask=np.array([False, False, True, False]))


@pytest.mark.slow
def test_mha_dropout_uses_torchs_masks():
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        t_mod, j_mod = _mha_pair(3, dropout=0.3)
        load_state(j_mod, t_mod)
        x = rng.standard_normal((5, 2, 8))
        for need_weights in (True, False):
            seed_both(11)
            _check_mha(t_mod, j_mod, x, x, x, need_weights=need_weights)


@pytest.mark.parametrize("case", slow_after([1, 0, 2, 3, 4, 5]))
def test_sdpa_matches_torch(case):
    rng = np.random.default_rng(case)
    shapes = [((2, 3, 4, 5), (2, 3, 6, 5)), ((1, 2, 3, 4), (1, 2, 3, 4)), ((3, 4, 2), (3, 5, 2))][case % 3]
    q, k = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    v = rng.standard_normal(shapes[1][:-1] + (3,))
    L, S = shapes[0][-2], shapes[1][-2]
    kwargs = [dict(), dict(is_causal=True), dict(scale=0.7), dict(attn_mask=rng.random((L, S)) < 0.7),
              dict(attn_mask=rng.standard_normal((L, S))), dict(scale=-0.3, is_causal=True)][case]
    mask = kwargs.pop("attn_mask", None)
    with jax.enable_x64(True):
        out, grads = input_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask, **kwargs),
                                jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
        t_mask = None if mask is None else torch.tensor(mask)
        t_out, t_grads = torch_input_grad(
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, t_mask, **kwargs), q, k, v)
        assert rel_err(out, t_out) <= TOL
        for g, tg in zip(grads, t_grads):
            assert rel_err(g, tg) <= TOL


def test_sdpa_dropout_and_gqa_match_torch():
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((2, 4, 3, 5)), rng.standard_normal((2, 2, 6, 5)), rng.standard_normal((2, 2, 6, 5))
    with jax.enable_x64(True):
        seed_both(5)
        out, _ = input_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, enable_gqa=True),
                            jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
        torch.manual_seed(5)
        t_out, _ = torch_input_grad(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=0.4, enable_gqa=True), q, k, v)
        assert rel_err(out, t_out) <= TOL


@pytest.mark.parametrize("batch_first", [False, True])
def test_self_attention_projects_once_with_the_packed_weight(batch_first):
    """As torch's ``_in_projection_packed``: self-attention (one array as query, key and value) is one
    product with the ``(3E, E)`` weight, cross-attention three; the outputs are compared with torch above."""
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    x = jnp.ones((5, 3, 16))

    def products(fn):
        return str(jax.make_jaxpr(fn)(x)).count("dot_general")

    packed = products(lambda a: mha(a, a, a, need_weights=False)[0])
    separate = products(lambda a: mha(a, a + 0, a + 0, need_weights=False)[0])
    assert separate - packed == 2
