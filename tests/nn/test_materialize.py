"""``jax_impl.nn._materialize``: the value is ``fn``'s, computed once, under jit and grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_impl.nn import _materialize
from jax_impl.nn._materialize import computed_once, runtime_false


def test_computed_once_returns_fn_value_and_differentiates():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 5)), jnp.float32)

    def fn(a):
        return jnp.sin(a) * 3.0, a.sum()

    got = jax.jit(lambda a: computed_once(fn, a, a))(x)
    want = fn(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    grad = jax.grad(lambda a: computed_once(fn, a, a)[0].sum())(x)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(jax.grad(lambda a: fn(a)[0].sum())(x)))


def test_runtime_false_is_false_and_not_folded():
    for v in (0.0, -0.0, -1.5, np.inf, -np.inf, np.nan):
        assert not bool(runtime_false(jnp.asarray([v], jnp.float32)))
    hlo = jax.jit(lambda a: computed_once(jnp.sin, a, a) * 2).lower(jnp.ones(3)).compile().as_text()
    assert "conditional(" in hlo  # the branch survives compilation: its result is a buffer


def test_kept_in_memory_passes_a_custom_calls_result_through():
    """A oneDNN convolution writes its result into its own buffer: the BatchNorm after it reads that
    buffer, with no conditional copying it, forward or backward; after an XLA op it keeps one.
    Both give torch's BatchNorm gradients (checked to 1e-4 as the layer tests do)."""
    import pytest
    import torch

    from jax_impl.backends import mkldnn
    from jax_impl.nn import _functional_norm as FN

    if not mkldnn.is_available():
        pytest.skip("oneDNN (onednn-cpu-gomp) is not installed")
    from jax_impl.nn import _conv_onednn

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    ct = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)

    def loss(x, w, conv):
        z = conv(x, w)
        return jnp.sum(FN.batch_norm(z, jnp.zeros(4), jnp.ones(4), training=True)[0] * ct)

    onednn = lambda a, b: _conv_onednn.conv2d(a, b, (1, 1), ((0, 0), (0, 0)), (1, 1))  # noqa: E731
    plain = lambda a, b: jax.lax.conv(a, b, (1, 1), "VALID") * 1.0  # noqa: E731
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    t_out = torch.nn.functional.batch_norm(torch.nn.functional.conv2d(tx, tw), None, None, training=True)
    (t_out * torch.tensor(ct)).sum().backward()
    for conv, copies in ((onednn, False), (plain, True)):
        step = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
        assert ("conditional(" in step.lower(x, w, conv).compile().as_text()) is copies
        for got, want in zip(step(x, w, conv), (tx.grad, tw.grad)):
            np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=1e-5)


def _compiled_adds(depth: int) -> int:
    """Elementwise ``add`` instructions in the compiled gradient of a pre-norm encoder stack."""
    import re

    from flax import nnx

    import jax_impl.nn as jnn

    layer = jnn.TransformerEncoderLayer(32, 2, 64, 0.0, batch_first=True, norm_first=True)
    graphdef, state = nnx.split(jnn.TransformerEncoder(layer, depth, enable_nested_tensor=False))
    grad = jax.jit(jax.grad(lambda s, x: jnp.sum(nnx.merge(graphdef, s)(x) ** 2)))
    text = grad.lower(state, jnp.ones((2, 8, 32))).compile().as_text()
    return sum(1 for line in text.splitlines() if re.search(r"= f32\[[\d,]+\]\{[\d,]+\} add\(", line))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU fusion property")
def test_a_residual_streams_cotangent_is_summed_once_per_layer():
    """A pre-norm stack's residual cotangents are kept in memory at each layer, so its compiled gradient
    grows linearly with the depth. Measured: 54 adds at depth 2 and 108 at 4 (110 and 384 without, XLA
    fusing every deeper layer's sums into each layer's fusions; 472 and 1752 at depths 4 and 8); bound:
    doubling the depth at most 2.2x the adds."""
    assert _compiled_adds(4) <= 2.2 * _compiled_adds(2)


def test_cotangent_kept_in_memory_is_the_identity_for_values_and_derivatives():
    x = jnp.arange(6.0).reshape(2, 3)
    f = lambda a: jnp.sum(jnp.sin(_materialize.cotangent_kept_in_memory(a)) * a)  # noqa: E731
    g = lambda a: jnp.sum(jnp.sin(a) * a)  # noqa: E731
    np.testing.assert_array_equal(jax.jit(jax.grad(f))(x), jax.jit(jax.grad(g))(x))
    np.testing.assert_array_equal(jax.jit(lambda a: jax.jvp(f, (a,), (jnp.ones_like(a),))[1])(x),
                                  jax.jit(lambda a: jax.jvp(g, (a,), (jnp.ones_like(a),))[1])(x))
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.grad(f)))(x), jax.jit(jax.vmap(jax.grad(g)))(x))
