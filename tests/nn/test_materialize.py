"""``jax_impl.nn._materialize``: the value is ``fn``'s, computed once, under jit and grad."""

import jax
import jax.numpy as jnp
import numpy as np

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
