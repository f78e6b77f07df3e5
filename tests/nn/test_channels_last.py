"""The channels-last eval path of jax_impl.models' ResNets (jax_impl/nn/_channels_last.py) vs torch.

In eval mode on XLA:CPU the stem and every block whose convs run on Eigen's
route compute with NHWC arrays. These tests run the model as a user would
(one ``jax.jit`` of the whole forward, the path on) against torch's eval
forward, check that the path was taken, and compare gradients through an
eval-mode model with torch's (the conv and max-pool derivatives are the NCHW
ones between transposes).

Bounds, measured (BatchNorm statistics and affine parameters drawn away from
0 and 1): logits ``max |jax - torch| / max |torch|`` 5.2e-7 - 1.6e-6 over the
grid below (oneDNN's channels-last kernels for the convs of at least 2**22
multiply-adds), where the NCHW path on the same inputs gives 4.8e-7 - 1.1e-6
and torch's own channels-last forward is 5.6e-7 - 1.7e-6 from its NCHW one;
bound 1e-5, the issue #6 eval bar. Gradients through the eval-mode model:
input 7.4e-7 and 9.9e-7, weights at most 1.6e-6 (median 5.1e-7 - 5.6e-7),
relative to each array's largest magnitude; bound 1e-5, the bar of the
train-mode SGD step, as the conv derivatives also sum over batch and image.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.models as jm
import torch_ref.models as tm
from jax_impl import nn
from jax_impl.nn import _channels_last as cl
from jax_impl.nn import functional as F
from parity.convert import load_torch_state_dict

# (model, batch, image): ResNet-18 at sizes where its last stages are and are not GEMM-routed
# (those stay NCHW), and ResNet-50 (Bottleneck: 1x1 convs as GEMMs over the channels).
# The default tier keeps ResNet-18's smallest and largest image.
# The path compiles ResNet-18 in channels-last form (about 20 s on 2 cores): these tests run in the slow
# tier; the default tier's time budget keeps only the cheapest, that train mode never takes the path.
GRID = [pytest.param("resnet18", 2, 32, marks=pytest.mark.slow), pytest.param("resnet18", 3, 48, marks=pytest.mark.slow),
        pytest.param("resnet18", 4, 64, marks=pytest.mark.slow), pytest.param("resnet18", 1, 96, marks=pytest.mark.slow),
        pytest.param("resnet50", 2, 64, marks=pytest.mark.slow)]


def _pair(name: str, seed: int = 0):
    torch.manual_seed(seed)
    if name == "resnet50":
        t = tm.resnet50(10, zero_init_residual=False)
        j = jm.resnet50(10, rngs=nnx.Rngs(0))
    else:
        t, j = tm.resnet18(10), jm.resnet18(10, rngs=nnx.Rngs(0))
    # Running statistics away from (0, 1), so that eval BatchNorm is not an identity.
    g = torch.Generator().manual_seed(seed + 1)
    for m in t.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(0.1 * torch.randn(m.num_features, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=g))
            m.weight.data.copy_(0.5 + torch.rand(m.num_features, generator=g))
            m.bias.data.copy_(0.1 * torch.randn(m.num_features, generator=g))
    load_torch_state_dict(j, t.state_dict())
    return t.eval(), j.eval()


def _rel(ours, theirs) -> float:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def _count_nhwc_convs(monkeypatch) -> list[int]:
    calls = [0]
    original = cl._conv_nhwc

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(cl, "_conv_nhwc", counting)
    return calls


@pytest.mark.parametrize(("name", "batch", "image"), GRID)
def test_eval_logits_match_torch(name, batch, image, monkeypatch):
    t, j = _pair(name)
    x = np.random.default_rng(batch * image).standard_normal((batch, 3, image, image)).astype(np.float32)
    with torch.no_grad():
        want = t(torch.from_numpy(x)).numpy()
    calls = _count_nhwc_convs(monkeypatch)
    graphdef, state = nnx.split(j)
    got = jax.jit(lambda s, a: nnx.merge(graphdef, s)(a))(state, jnp.asarray(x))
    assert calls[0] > 0, "the channels-last path was not taken"
    err = _rel(got, want)
    assert err <= 1e-5, err


@pytest.mark.slow  # ~6 s
def test_switch_off_runs_module_by_module(monkeypatch):
    t, j = _pair("resnet18")
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32))
    calls = _count_nhwc_convs(monkeypatch)
    with nn.channels_last_eval(False):
        assert not nn.channels_last_eval_enabled()
        off = j(x)
    assert calls[0] == 0
    assert nn.channels_last_eval_enabled()
    on = j(x)
    assert calls[0] > 0
    # Both are torch's eval forward; they differ only where the NCHW model routes a conv through
    # the GEMM forward (summation order), here not at all: the same Eigen convolutions.
    np.testing.assert_allclose(np.asarray(on), np.asarray(off), rtol=0, atol=1e-5 * float(jnp.abs(off).max()))


class _ScaledConv(nn.Conv2d):
    """A conv with its own call (as weight standardisation would have): the path must not bypass it."""

    def __call__(self, input):
        return 2.0 * super().__call__(input)


@pytest.mark.slow
@pytest.mark.parametrize("swap", ["relu", "block_relu", "conv", "maxpool"])
def test_replaced_layers_keep_the_module_path(swap):
    t, j = _pair("resnet18")
    if swap == "relu":
        t.relu, j.relu = torch.nn.GELU(), nn.GELU()
    elif swap == "block_relu":
        t.layer1[0].relu, j.layer1[0].relu = torch.nn.GELU(), nn.GELU()
    elif swap == "maxpool":
        t.maxpool, j.maxpool = torch.nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1)
    else:
        old = j.layer1[1].conv1  # a block that runs channels-last at 32x32 (layer2 takes the GEMM route)
        j.layer1[1].conv1 = _ScaledConv(old.in_channels, old.out_channels, 3, padding=1, bias=False)
        j.layer1[1].conv1.weight[...] = old.weight[...]
        t.layer1[1].conv1.weight.data.mul_(2.0)
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = t.eval()(torch.from_numpy(x)).numpy()
    got = j.eval()(jnp.asarray(x))
    assert _rel(got, want) <= 1e-5


def test_train_mode_never_takes_the_path(monkeypatch):
    _, j = _pair("resnet18")
    j.train()
    calls = _count_nhwc_convs(monkeypatch)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32))
    nnx.eval_shape(lambda m, a: m(a), j, x)  # the route is chosen while tracing: no op has to run
    assert calls[0] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "image"), [(2, 32), (3, 56)])
def test_eval_gradients_match_torch(batch, image, monkeypatch):
    t, j = _pair("resnet18", seed=batch)
    rng = np.random.default_rng(image)
    x = rng.standard_normal((batch, 3, image, image)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    tx = torch.from_numpy(x).requires_grad_(True)
    torch.nn.functional.cross_entropy(t(tx), torch.from_numpy(y)).backward()
    want_w = {k: p.grad.numpy() for k, p in t.named_parameters()}

    calls = _count_nhwc_convs(monkeypatch)
    graphdef, params, rest = nnx.split(j, nnx.Param, ...)

    def loss(p, a):
        logits = nnx.merge(graphdef, p, rest)(a)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), jnp.asarray(y)[:, None], 1))

    gp, gx = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, jnp.asarray(x))
    assert calls[0] > 0
    assert _rel(gx, tx.grad.numpy()) <= 1e-5
    got_w = {".".join(map(str, k)): np.asarray(v[...]) for k, v in gp.flat_state()}
    worst = max((_rel(got_w[k], w), k) for k, w in want_w.items() if np.abs(w).max() > 0)
    assert worst[0] <= 1e-5, worst


@pytest.mark.slow  # ~3 s; tests/nn/test_max_pool.py covers ties, NaN and inf in the default tier
def test_max_pool_nhwc_matches_torch_with_ties_nan_and_inf():
    # Integer-valued inputs tie inside windows (torch routes the gradient to the first maximum);
    # a NaN wins its windows, -inf everywhere in one window keeps -inf.
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (2, 5, 11, 9)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan
    x[1, 2, :3, :3] = -np.inf
    pool = nn.MaxPool2d(3, 2, 1)
    tx = torch.from_numpy(x).requires_grad_(True)
    ty = torch.nn.functional.max_pool2d(tx, 3, 2, 1)
    g = rng.standard_normal(ty.shape).astype(np.float32)
    ty.backward(torch.from_numpy(g))

    def f(a):
        return cl.to_nchw(cl.max_pool2d(pool, cl.to_nhwc(a)))

    y, vjp = jax.vjp(f, jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(y), ty.detach().numpy())
    np.testing.assert_array_equal(np.asarray(vjp(jnp.asarray(g))[0]), tx.grad.numpy())
    # Forward mode too: the tangent is the NCHW pool's.
    _, dy = jax.jvp(f, (jnp.asarray(x),), (jnp.ones_like(x),))
    _, dy_nchw = jax.jvp(lambda a: F.max_pool2d(a, 3, 2, 1), (jnp.asarray(x),), (jnp.ones_like(x),))
    np.testing.assert_array_equal(np.asarray(dy), np.asarray(dy_nchw))
