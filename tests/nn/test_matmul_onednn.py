"""jax_impl's oneDNN matmul route (jax_impl/nn/_matmul_onednn.py) against torch's CPU ``mm`` and ``linear``.

On a seeded grid of shapes and transposes, the product and both gradients
(each a product with other transposes, under jit) are compared with torch's
autograd of ``op(A) @ op(B)``. Measured on the 15 cases: the product bit
for bit torch's on 12 and both gradients on 13; the others within 9.2e-7 of
the largest magnitude (torch's GEMM and oneDNN's kernels sum in blocks of K
that differ on some shapes); bound 1e-5 (~11x). Derivatives beyond reverse mode (``jax.jvp``, second
order, ``vmap``) are compared with XLA's dot.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from jax_impl.backends import mkldnn
from jax_impl.nn import _gemm
from jax_impl.nn import functional as F
from jax_impl._cpuinfo import cpu_vendor

pytestmark = pytest.mark.skipif(not mkldnn.is_available(), reason="oneDNN (onednn-cpu-gomp) is not installed")


def _route():
    from jax_impl.nn import _matmul_onednn

    return _matmul_onednn


def _cases(count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(1, 300)),
             bool(rng.integers(2)), bool(rng.integers(2))) for _ in range(count)]


# (M, K, N, transpose_a, transpose_b)
_SHAPES = [
    (2080, 192, 576, False, True),   # a ViT-Ti layer's attention input projection (x @ W^T) ...
    (192, 2080, 768, True, False),   # ... an MLP weight gradient (G^T @ X) ...
    (2080, 768, 192, False, False),  # ... and an input gradient (G @ W)
    (7, 5, 3, False, True),          # smaller than a part per core
    (20, 33, 40, True, True),
    # The seeded grid: the slow tier pays for it.
    *(pytest.param(c, marks=pytest.mark.slow) for c in _cases(10, 0)),
]


@pytest.mark.parametrize("case", _SHAPES, ids=[f"case{i}" for i in range(len(_SHAPES))])
def test_matches_torch_product_and_gradients(case):
    m, k, n, ta, tb = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    g = rng.standard_normal((m, n), dtype=np.float32)
    tx, tw = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    ty = (tx.T if ta else tx) @ (tw.T if tb else tw)
    ty.backward(torch.from_numpy(g))
    fn = jax.jit(lambda p, q: _route().matmul(p, q, ta, tb))
    assert "jax_impl_onednn_matmul" in fn.lower(a, b).as_text()
    y, vjp = jax.vjp(fn, jnp.asarray(a), jnp.asarray(b))
    da, db = jax.jit(vjp)(jnp.asarray(g))
    for ours, ref in zip((y, da, db), (ty.detach(), tx.grad, tw.grad)):
        ours, ref = np.asarray(ours), ref.numpy()
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1e-30)
    if case == _SHAPES[0]:
        np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy())


def test_functional_linear_takes_the_route_from_2_to_the_28_macs():
    """``F.linear`` on a 3-D float32 input (folded into rows, as torch's ``linear``) runs oneDNN from
    ``2**28`` multiply-adds under jit; below it, in float64, eagerly, or with
    ``mkldnn.flags(enabled=False)``, XLA's dot runs. Against torch's ``F.linear`` on this shape (512
    terms per sum): measured 9.0e-7 of the largest magnitude, as XLA's dot (torch's own distance from
    float64 is 5.3e-7); bound 1e-5, the route's."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 128, 512), dtype=np.float32)
    w = rng.standard_normal((512, 512), dtype=np.float32)
    bias = rng.standard_normal(512, dtype=np.float32)
    fn = jax.jit(lambda p, q, c: F.linear(p, q, c))
    assert "jax_impl_onednn_matmul" in fn.lower(x, w, bias).as_text()
    expected = TF.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)).numpy()
    assert np.abs(np.asarray(fn(x, w, bias)) - expected).max() <= 1e-5 * np.abs(expected).max()

    def traced(p, q):  # traced afresh at each call (jit's cache does not see mkldnn's flag)
        return str(jax.make_jaxpr(lambda a, b: F.linear(a, b))(p, q))

    assert "onednn_matmul" in traced(x, w)
    assert "onednn_matmul_bias" in str(jax.make_jaxpr(lambda a, b, c: F.linear(a, b, c))(x, w, bias))
    assert "onednn_matmul" not in traced(x[:, :64], w)  # 2**27 multiply-adds
    with jax.enable_x64(True):
        assert "onednn_matmul" not in traced(x.astype(np.float64), w.astype(np.float64))
    assert not _gemm.takes_onednn_matmul(jnp.asarray(x), jnp.asarray(w))  # not traced
    with mkldnn.flags(enabled=False):
        assert "onednn_matmul" not in traced(x, w)


def test_forward_mode_second_order_and_vmap_match_xla():
    """jvp, a gradient of a gradient and vmap (a shared and a batched right operand) through the
    primitive, every transpose combination, against XLA's dot. Measured at most 3.4e-7; bound 1e-5."""
    rng = np.random.default_rng(2)
    m, k, n = 24, 40, 32
    for ta in (False, True):
        for tb in (False, True):
            a = jnp.asarray(rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32))
            b = jnp.asarray(rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32))
            ours = lambda p, q: _route().matmul(p, q, ta, tb)  # noqa: E731
            ref = lambda p, q: (p.T if ta else p) @ (q.T if tb else q)  # noqa: E731

            def close(x, y):
                x, y = np.asarray(x), np.asarray(y)
                assert np.abs(x - y).max() <= 1e-5 * np.abs(y).max(), (ta, tb, np.abs(x - y).max() / np.abs(y).max())

            ta_, tb_ = (jnp.asarray(rng.standard_normal(v.shape, dtype=np.float32)) for v in (a, b))
            close(jax.jit(lambda p, q: jax.jvp(ours, (p, q), (ta_, tb_))[1])(a, b), jax.jvp(ref, (a, b), (ta_, tb_))[1])

            def second(f):
                return jax.grad(lambda q: jnp.sum(jax.grad(lambda p: jnp.sum(f(p, q) ** 2))(a) ** 2))(b)

            close(jax.jit(lambda: second(ours))(), second(ref))
            stack_a = jnp.stack([a, 2 * a, -a])
            stack_b = jnp.stack([b, b * 0.5, -b])
            close(jax.jit(jax.vmap(lambda p: ours(p, b)))(stack_a), jax.vmap(lambda p: ref(p, b))(stack_a))
            close(jax.jit(jax.vmap(ours))(stack_a, stack_b), jax.vmap(ref)(stack_a, stack_b))


@pytest.mark.parametrize("shape", [(1120, 256, 1000), (64, 32, 48), (33, 17, 5)])
def test_bias_in_the_kernel_matches_torch_linear(shape):
    """``x @ W^T + b`` with the bias added inside oneDNN's kernel (what ``F.linear`` runs on the route)
    against torch's ``F.linear`` (its ``addmm``, MKL's sgemm): on Intel CPUs measured bit for bit on these
    shapes; elsewhere MKL takes other GEMM kernels (on an AMD EPYC: 0-87% of the values differ, by at most
    6.6e-7 of the largest magnitude), so the forward is held to the route's bound there. The gradients within
    8.3e-7 of the largest magnitude (the bias's sum over rows, and the products, sum in other orders than
    torch's); bound 1e-5, the route's."""
    m, k, n = shape
    rng = np.random.default_rng(m)
    x, w = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((n, k), dtype=np.float32)
    bias, g = rng.standard_normal(n, dtype=np.float32), rng.standard_normal((m, n), dtype=np.float32)
    tx, tw, tb = (torch.from_numpy(v).requires_grad_() for v in (x, w, bias))
    ty = TF.linear(tx, tw, tb)
    ty.backward(torch.from_numpy(g))
    fn = jax.jit(lambda p, q, c: _route().matmul_bias(p, q, c, transpose_b=True))
    assert "jax_impl_onednn_matmul_bias" in fn.lower(x, w, bias).as_text()
    y, vjp = jax.vjp(fn, jnp.asarray(x), jnp.asarray(w), jnp.asarray(bias))
    if cpu_vendor() == "GenuineIntel":
        np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy())
    else:
        ref = ty.detach().numpy()
        assert np.abs(np.asarray(y) - ref).max() <= 1e-5 * np.abs(ref).max()
    for ours, ref in zip(jax.jit(vjp)(jnp.asarray(g)), (tx.grad, tw.grad, tb.grad)):
        ours, ref = np.asarray(ours), ref.numpy()
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


def test_bias_forward_mode_second_order_and_vmap_match_xla():
    """jvp (every argument's tangent), a gradient of a gradient, and vmap with the bias shared or batched,
    against ``x @ W^T + b`` on XLA. Measured at most 2.1e-7; bound 1e-5."""
    rng = np.random.default_rng(3)
    x, w = (jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in ((24, 40), (32, 40)))
    bias = jnp.asarray(rng.standard_normal(32, dtype=np.float32))
    ours = lambda p, q, c: _route().matmul_bias(p, q, c, transpose_b=True)  # noqa: E731
    ref = lambda p, q, c: p @ q.T + c  # noqa: E731

    def close(a, b):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), np.abs(a - b).max() / np.abs(b).max()

    tangents = tuple(jnp.asarray(rng.standard_normal(v.shape, dtype=np.float32)) for v in (x, w, bias))
    close(jax.jit(lambda: jax.jvp(ours, (x, w, bias), tangents)[1])(), jax.jvp(ref, (x, w, bias), tangents)[1])
    close(jax.jit(lambda: jax.jvp(lambda c: ours(x, w, c), (bias,), tangents[2:])[1])(), jnp.broadcast_to(
        tangents[2], (24, 32)))

    def second(f):
        return jax.grad(lambda c: jnp.sum(jax.grad(lambda p: jnp.sum(f(p, w, c) ** 2))(x) ** 2))(bias)

    close(jax.jit(lambda: second(ours))(), second(ref))
    xs, biases = jnp.stack([x, 2 * x, -x]), jnp.stack([bias, -bias, 0.5 * bias])
    close(jax.jit(jax.vmap(lambda p: ours(p, w, bias)))(xs), jax.vmap(lambda p: ref(p, w, bias))(xs))
    close(jax.jit(jax.vmap(lambda p, c: ours(p, w, c)))(xs, biases), jax.vmap(lambda p, c: ref(p, w, c))(xs, biases))
    close(jax.jit(jax.vmap(lambda c: ours(x, w, c)))(biases), jax.vmap(lambda c: ref(x, w, c))(biases))
