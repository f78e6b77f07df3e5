"""BatchNorm1d/2d/3d and SyncBatchNorm against torch.nn, in all four modes.

Hypothesis draws the dimension (1d with 2-D and 3-D input, 2d, 3d), affine,
track_running_stats, momentum (including None: the cumulative average),
eps, shapes and dtype. Ten training steps on fresh batches (scaled and
shifted so the statistics matter), then an eval step, each compared with
torch: forward <= 1e-5 (f32) / 1e-12 (f64), gradients <= 1e-4 / 1e-10
(issue #5), and running_mean / running_var after the 10 steps <= 1e-6
relative in float32 (measured <= ~2e-7: torch accumulates the sums and the
running update in double, we in float32), num_batches_tracked equal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax_impl.nn as nn
from jax_impl.nn import _functional_norm as FN
from parity.layer_check import assert_within, rel_err

DRAWS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The default tier's share of the draws; the slow tier's sibling test runs all of DRAWS.
FEW_DRAWS = settings(DRAWS, max_examples=1)
STAT_TOL = {np.float32: 1e-6, np.float64: 1e-12}


@st.composite
def bn_config(draw):
    nd = draw(st.sampled_from([1, 2, 3]))
    c = draw(st.integers(1, 6))
    n = draw(st.integers(2, 5))
    if nd == 1:
        spatial = draw(st.sampled_from([(), (draw(st.integers(1, 6)),)]))
    else:
        spatial = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    # At least 4 values per channel: with 2, BatchNorm maps them to about +-1 whatever they are, the
    # input gradient is ~eps-sized, and relative errors measure that cancellation, not the port.
    if n * int(np.prod(spatial)) < 4:
        n = 4
    kw = dict(eps=draw(st.sampled_from([1e-5, 1e-3, 0.1])), momentum=draw(st.sampled_from([0.1, 0.3, 0.9, None])),
              affine=draw(st.booleans()), track_running_stats=draw(st.booleans()))
    return nd, c, (n, c, *spatial), kw, draw(st.integers(0, 2**16))


class _Compiled:
    """:func:`parity.layer_check.compare_module`'s forward and VJP, compiled once for all of a draw's steps.

    ``compare_module`` jits fresh closures (the cotangent baked in) on every call: a draw's eleven
    steps then compile 22 times. Here the cotangent is an argument, so the training steps share
    one forward and one gradient compile (eval one more each). Same comparison: forward on a copy,
    the gradient (input and parameters) on the module itself, whose statistics advance once.
    """

    def __init__(self):
        self.forward = nnx.jit(lambda m, x: m(x))
        self.grad = nnx.jit(nnx.grad(lambda m, x, ct: jnp.sum(m(x) * ct), argnums=(0, 1)))

    def compare(self, t_mod, j_mod, x: np.ndarray, seed: int) -> dict[str, float]:
        t_mod.zero_grad(set_to_none=True)
        tx = torch.tensor(x, requires_grad=True)
        t_out = t_mod(tx)
        ct = np.random.default_rng([seed, 1]).standard_normal(tuple(t_out.shape)).astype(x.dtype)
        (t_out * torch.tensor(ct)).sum().backward()
        errors = {"forward": rel_err(self.forward(nnx.clone(j_mod), jnp.asarray(x)), t_out.detach().numpy())}
        g_mod, g_x = self.grad(j_mod, jnp.asarray(x), jnp.asarray(ct))
        errors["grad input"] = rel_err(g_x, tx.grad.numpy())
        flat = {".".join(map(str, k)): v[...] for k, v in nnx.to_flat_state(nnx.state(g_mod, nnx.Param))}
        for name, param in t_mod.named_parameters():
            errors[f"grad {name}"] = rel_err(flat[name], param.grad.numpy())
        return errors


def _rel(a, b, scale: float = 0.0) -> float:
    """``max |a - b|`` over ``max(max |b|, scale)``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), scale, 1e-300))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@FEW_DRAWS
@given(cfg=bn_config())
def test_batchnorm_four_modes_match_torch(dtype, cfg):
    nd, c, shape, kw, seed = cfg
    rng = np.random.default_rng(seed)
    with jax.enable_x64(dtype == np.float64):
        tdt = torch.float64 if dtype == np.float64 else torch.float32
        t_mod = getattr(torch.nn, f"BatchNorm{nd}d")(c, **kw, dtype=tdt)
        j_mod = getattr(nn, f"BatchNorm{nd}d")(c, **kw, dtype=jnp.dtype(dtype))
        if kw["affine"]:  # non-trivial affine parameters
            w, b = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
            with torch.no_grad():
                t_mod.weight.copy_(torch.tensor(w))
                t_mod.bias.copy_(torch.tensor(b))
            j_mod.weight[...], j_mod.bias[...] = jnp.asarray(w), jnp.asarray(b)
        batch_means = []
        compiled = _Compiled()
        for step in range(10):
            x = (rng.standard_normal(shape) * rng.uniform(0.5, 3) + rng.uniform(-2, 2)).astype(dtype)
            batch_means.append(np.abs(x.mean(axis=tuple(a for a in range(x.ndim) if a != 1))).max())
            assert_within(compiled.compare(t_mod, j_mod, x, seed + step), dtype)
        if kw["track_running_stats"]:
            # The running mean averages the batch means; its rounding scales with them, not with the average,
            # which can cancel to near zero. Measured (momentum=None, 10 batches of 5 values, batch means up
            # to 2.2 averaging to 0.041): torch's float32 running mean 2.5e-8 from the float64 one, ours 3.5e-8,
            # 1.4e-6 of the average but 3e-8 of the largest batch mean.
            scale = max(batch_means)
            assert _rel(j_mod.running_mean[...], t_mod.running_mean.numpy(), scale) <= STAT_TOL[dtype]
            assert _rel(j_mod.running_var[...], t_mod.running_var.numpy()) <= STAT_TOL[dtype]
            assert int(j_mod.num_batches_tracked[...]) == int(t_mod.num_batches_tracked) == 10
        else:
            assert j_mod.running_mean is None and j_mod.num_batches_tracked is None
        # Eval: running statistics if tracked, else batch statistics (torch's bn_training).
        t_mod.eval()
        j_mod.eval()
        x = rng.standard_normal(shape).astype(dtype)
        assert_within(compiled.compare(t_mod, j_mod, x, seed), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@DRAWS
@given(cfg=bn_config())
def test_batchnorm_four_modes_match_torch_all_draws(dtype, cfg):
    test_batchnorm_four_modes_match_torch.hypothesis.inner_test(dtype, cfg)


def test_state_keys_match_torch():
    for kw in (dict(), dict(affine=False), dict(track_running_stats=False)):
        t, j = torch.nn.BatchNorm2d(3, **kw), nn.BatchNorm2d(3, **kw)
        ours = sorted(".".join(map(str, k)) for k, _ in nnx.state(j, nnx.Any(nnx.Param, nnx.BatchStat)).flat_state())
        assert ours == sorted(t.state_dict()), kw


def test_update_under_nnx_jit():
    t, j = torch.nn.BatchNorm1d(4, momentum=None), nn.BatchNorm1d(4, momentum=None)
    step = nnx.jit(lambda m, x: m(x))
    for i in range(5):
        x = np.random.default_rng(i).standard_normal((8, 4)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(step(j, x)), t(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(j.running_var[...]), t.running_var.numpy(), rtol=1e-6)
    assert int(j.num_batches_tracked[...]) == 5


def test_errors_match_torch():
    for make_t, make_j, shape in [
        (lambda: torch.nn.BatchNorm2d(3), lambda: nn.BatchNorm2d(3), (2, 3, 4)),
        (lambda: torch.nn.BatchNorm1d(3), lambda: nn.BatchNorm1d(3), (2, 3, 4, 4)),
        (lambda: torch.nn.BatchNorm3d(3), lambda: nn.BatchNorm3d(3), (2, 3, 4, 4)),
        (lambda: torch.nn.BatchNorm1d(3), lambda: nn.BatchNorm1d(3), (1, 3)),  # one value per channel
    ]:
        x = np.ones(shape, np.float32)
        with pytest.raises(ValueError) as theirs:
            make_t()(torch.tensor(x))
        with pytest.raises(ValueError) as ours:
            make_j()(x)
        assert str(ours.value) == str(theirs.value)


# The 3-D and 5-D inputs run in the slow tier: each shape compiles its own three derivatives.
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)])
def test_training_derivatives_of_every_order_match_torch(seed):
    """The training path's custom JVP against torch in float64: its forward mode
    (``torch.func.jvp``), its transpose (the backward, including the running
    statistics' path, which torch leaves out of autograd and the reference here
    writes out) and a gradient of the gradient (torch's double backward).
    Measured: all within 1e-15 relative; the bound is float64's 1e-12 of #5."""
    rng = np.random.default_rng(seed)
    shape = [(6, 3), (4, 3, 5), (3, 2, 4, 3), (2, 4, 2, 3, 2)][seed]
    c = shape[1]
    x, tx_ = (rng.standard_normal(shape) * 2 + 1 for _ in range(2))
    w, b, tw, tb = (rng.standard_normal(c) for _ in range(4))
    ct = rng.standard_normal(shape)
    axes = (0, *range(2, len(shape)))
    with jax.enable_x64(True):
        def ours(x, w, b):
            y, rm, rv = FN.batch_norm(x, jnp.zeros(c), jnp.ones(c), w, b, training=True, momentum=0.3)
            return y, rm, rv

        def theirs(x, w, b):
            y = torch.nn.functional.batch_norm(x, None, None, w, b, training=True)
            n = x.numel() // c
            mean = x.mean(axes)
            var_sum = ((x - mean.reshape((1, c) + (1,) * (x.ndim - 2))) ** 2).sum(axes)
            return y, 0.3 * mean, 0.3 * var_sum / (n - 1) + 0.7

        T = lambda a: torch.tensor(a, requires_grad=True)  # noqa: E731
        # Each derivative jitted: one compilation each instead of one per eager op of the custom rules.
        _, j_tan = jax.jit(lambda p, t: jax.jvp(ours, p, t))((x, w, b), (tx_, tw, tb))
        _, t_tan = torch.func.jvp(theirs, tuple(map(torch.tensor, (x, w, b))), tuple(map(torch.tensor, (tx_, tw, tb))))
        for a, t in zip(j_tan, t_tan):
            assert _rel(a, t.numpy()) <= 1e-12

        def j_loss(x, w, b):
            y, rm, rv = ours(x, w, b)
            return jnp.sum(y * ct) + jnp.sum(rm * rv)

        txs = [T(a) for a in (x, w, b)]
        y, rm, rv = theirs(*txs)
        t_grads = torch.autograd.grad((y * torch.tensor(ct)).sum() + (rm * rv).sum(), txs, create_graph=True)
        for a, t in zip(jax.jit(jax.grad(j_loss, argnums=(0, 1, 2)))(x, w, b), t_grads):
            assert _rel(a, t.detach().numpy()) <= 1e-12
        # d/dw of |dL/dx|^2: reverse over reverse.
        (t_grads[0] ** 2).sum().backward()
        j_ww = jax.jit(jax.grad(lambda w: jnp.sum(jax.grad(j_loss)(x, w, b) ** 2)))(w)
        assert _rel(j_ww, txs[1].grad.numpy()) <= 1e-12


def test_training_backward_reduces_the_cotangent_twice_as_torch_does():
    """torch's backward makes two passes of reductions over an activation, ``sum(dy)`` and
    ``sum((x - mean) * dy)``; the forward two more (mean, variance). Differentiating the
    forward by its operations would add a third and a fourth in the backward pass."""
    x = jnp.ones((4, 3, 5, 5))

    def loss(x, w, b):
        return jnp.sum(FN.batch_norm(x, jnp.zeros(3), jnp.ones(3), w, b, training=True)[0] ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(x, jnp.ones(3), jnp.zeros(3))
    reductions = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "reduce_sum" and e.invars[0].aval.shape == x.shape]
    # The loss's own sum is the fifth.
    assert len(reductions) == 5


# ----------------------------------------------------------------------------- SyncBatchNorm


def test_gather_stats_merge_equals_global_statistics():
    """torch's count-weighted merge of per-replica (mean, invstd) equals the statistics of the whole batch."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        parts = [rng.standard_normal((n, 3, 2)) * 2 + 1 for n in (2, 5, 3)]
        stats = [FN.batch_norm_stats(jnp.asarray(p), 1e-5) for p in parts]
        mean, invstd, var_n, n = FN.gather_stats_with_counts(
            jnp.stack([s[0] for s in stats]), jnp.stack([s[1] for s in stats]),
            jnp.asarray([p.size // 3 for p in parts], jnp.float64), 1e-5,
        )
        whole = np.concatenate(parts)
        np.testing.assert_allclose(np.asarray(mean), whole.mean((0, 2)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(var_n / n), whole.var((0, 2)), rtol=1e-10)
        assert float(n) == whole.size // 3


@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_sync_batchnorm_equals_torch_batchnorm_on_the_global_batch(replicas, momentum):
    """torch's SyncBatchNorm needs CUDA; mathematically it is BatchNorm over the concatenated batch.

    Each replica normalises its shard with the merged statistics; stacked, the
    outputs, the gradients (summed over replicas for the parameters) and the
    running statistics equal torch's BatchNorm2d on the global batch.
    Measured float32: forward ~2e-7, grads ~3e-7, running stats ~1e-7.
    """
    rng = np.random.default_rng(replicas)
    x = (rng.standard_normal((replicas * 3, 4, 3, 3)) * 2 + 0.5).astype(np.float32)
    ct = rng.standard_normal(x.shape).astype(np.float32)
    t = torch.nn.BatchNorm2d(4, momentum=momentum)
    with torch.no_grad():
        t.weight.copy_(torch.tensor(rng.standard_normal(4)))
        t.bias.copy_(torch.tensor(rng.standard_normal(4)))
    j = nn.SyncBatchNorm(4, momentum=momentum, axis_name="replica")
    j.weight[...], j.bias[...] = jnp.asarray(t.weight.detach().numpy()), jnp.asarray(t.bias.detach().numpy())

    tx = torch.tensor(x, requires_grad=True)
    t_out = t(tx)
    (t_out * torch.tensor(ct)).sum().backward()

    def loss(m, xs, cts):
        y = m(xs)
        return jnp.sum(y * cts), y

    @nnx.jit
    @nnx.vmap(in_axes=(None, 0, 0), out_axes=0, axis_name="replica")
    def per_replica(m, xs, cts):
        (_, y), (g_mod, g_x) = nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(m, xs, cts)
        return nnx.state(g_mod, nnx.Param), g_x, y

    shards = x.reshape(replicas, 3, 4, 3, 3)
    g_params, g_x, y = per_replica(j, jnp.asarray(shards), jnp.asarray(ct.reshape(shards.shape)))
    np.testing.assert_allclose(np.asarray(y).reshape(x.shape), t_out.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(g_x).reshape(x.shape), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    g = {k[0]: np.asarray(v[...]).sum(0) for k, v in g_params.flat_state()}
    np.testing.assert_allclose(g["weight"], t.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g["bias"], t.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    # The replicas' identical running statistics land in the (broadcast) module.
    assert _rel(j.running_mean[...], t.running_mean.numpy()) <= 1e-6
    assert _rel(j.running_var[...], t.running_var.numpy()) <= 1e-6
    assert int(j.num_batches_tracked[...]) == 1


def test_sync_batchnorm_without_axis_is_batchnorm_and_convert():
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 2)).astype(np.float32)
    a, b = nn.SyncBatchNorm(3), nn.BatchNorm2d(3)
    np.testing.assert_array_equal(np.asarray(a(x)), np.asarray(b(x)))
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3))
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model, axis_name="i")
    assert isinstance(model[1], nn.SyncBatchNorm) and model[1].axis_name == "i"
    with pytest.raises(NotImplementedError, match="process_group"):
        nn.SyncBatchNorm(3, process_group=object())


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (0, 3)), ("BatchNorm1d", (0, 3, 4)),
                                       ("BatchNorm2d", (0, 3, 2, 2)), ("BatchNorm3d", (0, 3, 1, 2, 2))])
def test_empty_batch_in_training_leaves_running_stats_like_torch(cls, shape):
    t_mod = getattr(torch.nn, cls)(3)
    x = torch.zeros(shape, requires_grad=True)
    t_mod(x).sum().backward()
    for mode in ("eager", "jit", "grad"):
        j_mod = getattr(nn, cls)(3)
        if mode == "eager":
            y = j_mod(jnp.zeros(shape))
        elif mode == "jit":
            y = nnx.jit(lambda m, a: m(a))(j_mod, jnp.zeros(shape))
        else:
            grads = nnx.grad(lambda m, a: m(a).sum())(j_mod, jnp.zeros(shape))
            np.testing.assert_array_equal(np.asarray(grads.weight[...]), t_mod.weight.grad.numpy())
            y = jnp.zeros(shape)
        assert y.shape == shape
        np.testing.assert_array_equal(np.asarray(j_mod.running_mean[...]), t_mod.running_mean.numpy())
        np.testing.assert_array_equal(np.asarray(j_mod.running_var[...]), t_mod.running_var.numpy())
        assert int(j_mod.num_batches_tracked[...]) == int(t_mod.num_batches_tracked)
