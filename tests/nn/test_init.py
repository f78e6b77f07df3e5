"""``jax_impl.nn.init`` against ``torch.nn.init`` (torch 2.13).

Random initialisers are compared as distributions: we record the exact
``uniform_(a, b)`` / ``normal_(mean, std)`` parameters torch's initialiser
uses (a ``TorchFunctionMode`` spy on the drawn shape), draw 1e6 samples from
torch with those parameters and 1e6 from ours (vmapped keys, same shape), and
compare moments and support.
"""

import math
import warnings

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from jax_impl.nn import init as J

N = 2 * 10**5
# Standard error of a 2e5-sample mean is sigma/447, of a sample std ~ sigma/632
# (normal) or sigma/500 (uniform). Comparing two independent draws doubles the
# variance, so 2.5e-2*sigma for means and 1.2e-2 relative for stds is > 7 standard errors.
MEAN_TOL, STD_RTOL = 2.5e-2, 1.2e-2
# P(max of 2e5 uniforms stays 1e-4*width below the bound) = (1-1e-4)^2e5 ~ e^-20.
EDGE_TOL = 1e-4

NONLINEARITIES = [
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu",
]

shapes = st.lists(st.integers(1, 6), min_size=2, max_size=5).map(tuple)


class _Spy:
    """Records the (lo, hi) / (mean, std) of every ``Tensor.uniform_``/``normal_`` call.

    (A TorchFunctionMode would miss them: kaiming_uniform_ dispatches itself first.)
    """

    def __enter__(self):
        self.calls, self._saved = [], {}
        for name in ("uniform_", "normal_"):
            orig = self._saved[name] = getattr(torch.Tensor, name)

            def spy(t, *args, _orig=orig, _name=name, **kw):
                self.calls.append((_name, tuple(args[:2])))
                return _orig(t, *args, **kw)

            setattr(torch.Tensor, name, spy)
        return self

    def __exit__(self, *exc):
        for name, orig in self._saved.items():
            setattr(torch.Tensor, name, orig)


def torch_params(fn, shape, **kw):
    with _Spy() as spy:
        fn(torch.empty(shape), **kw)
    assert len(spy.calls) == 1, spy.calls
    return spy.calls[0]


def ours_many(fn, shape, **kw):
    reps = -(-N // math.prod(shape))
    keys = jax.random.split(jax.random.key(0), reps)
    return np.asarray(jax.vmap(lambda k: fn(k, shape, **kw))(keys), np.float64).ravel()


def check_against(ours, name, params):
    if name == "uniform_":
        lo, hi = params
        ref = torch.empty(N, dtype=torch.float64).uniform_(lo, hi).numpy()
        width = hi - lo
        assert lo <= ours.min() < lo + EDGE_TOL * width
        assert hi - EDGE_TOL * width < ours.max() < hi or ours.max() == hi == lo
        scale = width / math.sqrt(12)
    else:
        mean, scale = params
        ref = torch.empty(N, dtype=torch.float64).normal_(mean, scale).numpy()
    assert abs(ours.mean() - ref.mean()) <= MEAN_TOL * scale
    assert ours.std() == pytest.approx(ref.std(), rel=STD_RTOL)


def check_errors_equal(torch_call, ours_call):
    try:
        torch_call()
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever torch raises
        with pytest.raises(type(e)) as ei:
            ours_call()
        assert str(ei.value) == str(e)
    else:
        ours_call()


# ---- gain and fans -----------------------------------------------------------

@pytest.mark.parametrize("nl", NONLINEARITIES)
@pytest.mark.parametrize("param", [None, 0, 0.2, 3, -1.5, True, "x", [1]])
def test_calculate_gain(nl, param):
    check_errors_equal(
        lambda: torch.nn.init.calculate_gain(nl, param), lambda: J.calculate_gain(nl, param)
    )
    try:
        expected = torch.nn.init.calculate_gain(nl, param)
    except ValueError:
        return
    assert J.calculate_gain(nl, param) == expected


@pytest.mark.parametrize("nl", ["softmax", "gelu", "Relu"])
def test_calculate_gain_unsupported(nl):
    check_errors_equal(lambda: torch.nn.init.calculate_gain(nl), lambda: J.calculate_gain(nl))


@given(shape=st.lists(st.integers(0, 7), min_size=0, max_size=5).map(tuple))
@settings(max_examples=40, deadline=None)
def test_fans(shape):
    check_errors_equal(
        lambda: torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape)),
        lambda: J.calculate_fan_in_and_fan_out(shape),
    )
    if len(shape) >= 2:
        assert J.calculate_fan_in_and_fan_out(shape) == torch.nn.init._calculate_fan_in_and_fan_out(
            torch.empty(shape)
        )


# ---- random initialisers ---------------------------------------------------------

gains = st.sampled_from([1.0, 0.5, math.sqrt(2)])
kaiming_kw = st.fixed_dictionaries({
    "a": st.sampled_from([0, 0.01, math.sqrt(5), 0.3]),
    "mode": st.sampled_from(["fan_in", "fan_out", "FAN_OUT"]),
    "nonlinearity": st.sampled_from(["leaky_relu", "relu", "tanh", "linear", "selu"]),
})
CASES = {
    "xavier_uniform_": st.fixed_dictionaries({"gain": gains}),
    "xavier_normal_": st.fixed_dictionaries({"gain": gains}),
    "kaiming_uniform_": kaiming_kw,
    "kaiming_normal_": kaiming_kw,
    "uniform_": st.sampled_from([{}, {"a": -2.0, "b": 3.0}, {"a": 0.5, "b": 0.75}]),
    "normal_": st.sampled_from([{}, {"mean": 1.5, "std": 0.1}, {"mean": -3.0, "std": 2.0}]),
}


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
@settings(max_examples=2, deadline=None)
def test_random_initialisers_match_torch_distribution(name, data):
    shape = data.draw(shapes)
    kw = data.draw(CASES[name])
    params = torch_params(getattr(torch.nn.init, name), shape, **kw)
    check_against(ours_many(getattr(J, name), shape, **kw), *params)


@pytest.mark.parametrize("kw", [{}, {"mean": 0.5, "std": 2.0, "a": -1.0, "b": 1.0}, {"a": 0.5, "b": 3.0}])
def test_trunc_normal(kw):
    ours = ours_many(J.trunc_normal_, (1000,), **kw)
    ref = torch.nn.init.trunc_normal_(torch.empty(N, dtype=torch.float64), **kw).numpy()
    a, b = kw.get("a", -2.0), kw.get("b", 2.0)
    width = b - a
    assert a <= ours.min() and ours.max() <= b
    assert abs(ours.min() - ref.min()) < 0.01 * width and abs(ours.max() - ref.max()) < 0.01 * width
    assert abs(ours.mean() - ref.mean()) <= MEAN_TOL * ref.std()
    assert ours.std() == pytest.approx(ref.std(), rel=STD_RTOL)


def test_trunc_normal_warns_like_torch():
    kw = dict(mean=5.0, std=1.0, a=-1.0, b=1.0)
    with pytest.warns(UserWarning, match="mean is more than 2 std") as ours:
        J.trunc_normal_(jax.random.key(0), (4,), **kw)
    with pytest.warns(UserWarning) as theirs:
        torch.nn.init.trunc_normal_(torch.empty(4), **kw)
    assert str(ours[0].message) == str(theirs[0].message)


@given(shape=shapes, gain=gains)
@settings(max_examples=5, deadline=None)
def test_orthogonal(shape, gain):
    ours = np.asarray(J.orthogonal_(jax.random.key(1), shape, jnp.float64 if jax.config.x64_enabled else jnp.float32, gain=gain))
    ref = torch.nn.init.orthogonal_(torch.empty(shape), gain=gain).numpy()
    assert ours.shape == ref.shape
    flat_o, flat_r = ours.reshape(shape[0], -1), ref.reshape(shape[0], -1)
    gram = (lambda m: m @ m.T) if flat_o.shape[0] <= flat_o.shape[1] else (lambda m: m.T @ m)
    np.testing.assert_allclose(gram(flat_o), gram(flat_r), atol=1e-5 * gain**2)


def test_orthogonal_entry_distribution():
    # Entries of a Haar (3, 5) semi-orthogonal matrix have mean 0, variance 1/5.
    shape, reps = (3, 5), 20000
    ours = np.asarray(jax.vmap(lambda k: J.orthogonal_(k, shape))(jax.random.split(jax.random.key(2), reps)))
    ref = np.stack([torch.nn.init.orthogonal_(torch.empty(shape)).numpy() for _ in range(2000)])
    # 3e5 entries: std error of the std ~ 1e-3 relative; 2000*15 torch entries ~ 4e-3.
    assert ours.std() == pytest.approx(ref.std(), rel=0.02)
    assert ours.std() == pytest.approx(math.sqrt(1 / 5), rel=5e-3)
    # The sign fix makes the first column's signs symmetric (not biased to +).
    assert abs(np.mean(ours[:, :, 0] > 0) - 0.5) < 0.01


@pytest.mark.parametrize("sparsity,std", [(0.1, 0.01), (0.5, 1.0), (0.9, 0.3), (-0.5, 0.2), (1.5, 0.1)])
def test_sparse(sparsity, std):
    shape = (40, 5000)  # 2e5 entries
    ours = np.asarray(J.sparse_(jax.random.key(3), shape, sparsity=sparsity, std=std), np.float64)
    ref = torch.nn.init.sparse_(torch.empty(shape, dtype=torch.float64), sparsity, std).numpy() if sparsity < 1.2 else np.zeros(shape)
    np.testing.assert_array_equal((ours == 0).sum(0), (ref == 0).sum(0))
    if (ours != 0).any():
        check_against(ours[ours != 0], "normal_", (0.0, std))
    # Which rows are zeroed is uniform per column.
    if 0 < (ours == 0).mean() < 1:
        assert np.ptp((ours == 0).mean(1)) < 0.1


# ---- deterministic initialisers: exact ---------------------------------------------

@given(shape=st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple), val=st.floats(-5, 5))
@settings(max_examples=10, deadline=None)
def test_constant_ones_zeros(shape, val):
    k = jax.random.key(0)
    np.testing.assert_array_equal(J.constant_(k, shape, val=val), torch.nn.init.constant_(torch.empty(shape), val))
    np.testing.assert_array_equal(J.ones_(k, shape), torch.nn.init.ones_(torch.empty(shape)))
    np.testing.assert_array_equal(J.zeros_(k, shape), torch.nn.init.zeros_(torch.empty(shape)))


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (0, 2), (3,), (2, 2, 2)])
def test_eye(shape):
    k = jax.random.key(0)
    check_errors_equal(lambda: torch.nn.init.eye_(torch.empty(shape)), lambda: J.eye_(k, shape))
    if len(shape) == 2:
        np.testing.assert_array_equal(J.eye_(k, shape), torch.nn.init.eye_(torch.empty(shape)))


@given(shape=st.lists(st.integers(1, 6), min_size=2, max_size=6).map(tuple), groups=st.sampled_from([1, 2, 3]))
@settings(max_examples=20, deadline=None)
def test_dirac(shape, groups):
    k = jax.random.key(0)
    check_errors_equal(lambda: torch.nn.init.dirac_(torch.empty(shape), groups), lambda: J.dirac_(k, shape, groups=groups))
    if 3 <= len(shape) <= 5 and shape[0] % groups == 0:
        np.testing.assert_array_equal(J.dirac_(k, shape, groups=groups), torch.nn.init.dirac_(torch.empty(shape), groups))


# ---- errors and warnings -----------------------------------------------------------

@pytest.mark.parametrize(
    "name,shape,kw",
    [
        ("kaiming_uniform_", (3, 4), {"mode": "fan_avg"}),
        ("kaiming_normal_", (3, 4), {"mode": "Fan_Sideways"}),
        ("kaiming_uniform_", (3, 4), {"nonlinearity": "gelu"}),
        ("kaiming_normal_", (3, 4), {"a": True}),
        ("kaiming_uniform_", (3,), {}),
        ("xavier_uniform_", (3,), {}),
        ("xavier_normal_", (0, 0), {}),
        ("orthogonal_", (3,), {}),
        ("sparse_", (3, 4, 5), {"sparsity": 0.1}),
        ("uniform_", (3,), {"a": 1.0, "b": 0.0}),
        ("uniform_", (3,), {"a": -3e38, "b": 3e38}),
        ("normal_", (3,), {"std": -1.0}),
    ],
)
def test_errors_match_torch(name, shape, kw):
    check_errors_equal(
        lambda: getattr(torch.nn.init, name)(torch.empty(shape), **kw),
        lambda: getattr(J, name)(jax.random.key(0), shape, **kw),
    )


@pytest.mark.parametrize("name", ["kaiming_uniform_", "kaiming_normal_"])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0, 2)])
def test_zero_element_kaiming_warns_and_returns_zeros(name, shape):
    # torch skips mode validation for empty tensors, so a bad mode passes too.
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        getattr(torch.nn.init, name)(torch.empty(shape), mode="bad")
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        out = getattr(J, name)(jax.random.key(0), shape, mode="bad")
    assert out.shape == shape and not np.asarray(out).any()


def test_orthogonal_zero_elements():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert J.orthogonal_(jax.random.key(0), (0, 3)).shape == (0, 3)


# ---- layer defaults ---------------------------------------------------------------

def torch_layer_params(module):
    """The parameters torch's reset_parameters draws from, spied on a real layer."""
    with _Spy() as spy:
        module.reset_parameters()
    return spy.calls  # [weight (uniform_ via kaiming), bias]


def check_layer(ours_fn, module):
    calls = torch_layer_params(module)
    reps = -(-N // module.weight.numel())
    outs = jax.vmap(ours_fn)(jax.random.split(jax.random.key(4), reps))
    assert outs["weight"].shape[1:] == tuple(module.weight.shape)
    check_against(np.asarray(outs["weight"], np.float64).ravel(), *calls[0])
    if module.bias is None:
        assert "bias" not in outs and len(calls) == 1
    else:
        assert outs["bias"].shape[1:] == tuple(module.bias.shape)
        b = np.asarray(outs["bias"], np.float64).ravel()
        lo, hi = calls[1][1]
        assert lo <= b.min() and b.max() < hi
        assert abs(b.mean()) <= 0.05 * hi  # >= 2e4 bias samples: mean se ~ 0.002*hi


@given(out_f=st.integers(1, 20), in_f=st.integers(1, 20), bias=st.booleans())
@settings(max_examples=2, deadline=None)
def test_linear_default(out_f, in_f, bias):
    check_layer(lambda k: J.linear_default(k, out_f, in_f, bias), torch.nn.Linear(in_f, out_f, bias=bias))


@given(
    nd=st.integers(1, 3), groups=st.sampled_from([1, 2]), cpg_in=st.integers(1, 3),
    cpg_out=st.integers(1, 3), k=st.integers(1, 3), bias=st.booleans(), transposed=st.booleans(),
)
@settings(max_examples=3, deadline=None)
def test_conv_default(nd, groups, cpg_in, cpg_out, k, bias, transposed):
    in_c, out_c, ks = cpg_in * groups, cpg_out * groups, (k,) * nd
    cls = getattr(torch.nn, f"Conv{'Transpose' if transposed else ''}{nd}d")
    module = cls(in_c, out_c, ks, groups=groups, bias=bias)
    check_layer(
        lambda key: J.conv_default(key, out_c, cpg_in, ks, bias, transposed, groups=groups), module
    )


def test_conv_transpose_fan_in_from_dim_1():
    # ConvTranspose2d(6, 4, 3, groups=2): weight (6, 2, 3, 3), fan_in = 2*9 = 18.
    out = J.conv_default(jax.random.key(0), 4, 3, (3, 3), transposed=True, groups=2)
    assert out["weight"].shape == (6, 2, 3, 3) and out["bias"].shape == (4,)
    assert float(jnp.abs(out["bias"]).max()) < 1 / math.sqrt(18)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(max_examples=15, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=2, max_size=4), seed=st.integers(0, 2**31),
    which=st.sampled_from(["uniform", "xavier_uniform", "kaiming_uniform"]), gain=st.floats(0.1, 3.0),
)
def test_generator_draws_equal_torch_bit_for_bit(dtype, shape, seed, which, gain):
    """With a Generator (or None = the global one) the uniform-based inits draw torch's exact numbers."""
    from jax_impl.data import Generator, manual_seed

    kwargs = {"uniform": dict(a=-gain, b=gain / 2), "xavier_uniform": dict(gain=gain),
              "kaiming_uniform": dict(a=gain)}[which]
    with jax.enable_x64(dtype == np.float64):
        t = torch.empty(shape, dtype=torch.float64 if dtype == np.float64 else torch.float32)
        getattr(torch.nn.init, f"{which}_")(t, generator=torch.Generator().manual_seed(seed), **kwargs)
        ours = getattr(J, f"{which}_")(Generator(seed), shape, jnp.dtype(dtype), **kwargs)
        np.testing.assert_array_equal(np.asarray(ours), t.numpy())
        # None draws from the global generator, as torch's default does.
        torch.manual_seed(seed)
        manual_seed(seed)
        t = getattr(torch.nn.init, f"{which}_")(torch.empty(shape, dtype=t.dtype), **kwargs)
        np.testing.assert_array_equal(np.asarray(getattr(J, f"{which}_")(None, shape, jnp.dtype(dtype), **kwargs)),
                                      t.numpy())


def test_normal_inits_from_generator_are_reproducible():
    from jax_impl.data import Generator

    a = J.kaiming_normal_(Generator(3), (64, 32))
    b = J.kaiming_normal_(Generator(3), (64, 32))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert abs(float(np.asarray(a).std()) * np.sqrt(32) / np.sqrt(2) - 1) < 0.05


@pytest.mark.parametrize(("dtype", "grid"), [("float32", "short"),  # the slow tier: the whole grid, and float64
                                             pytest.param("float32", "full", marks=pytest.mark.slow),
                                             pytest.param("float64", "short", marks=pytest.mark.slow)])
def test_jax_key_draws_are_jaxs_numbers_whatever_the_shape(dtype, grid):
    """With a jax key, uniform_ and normal_ give jax.random's own numbers for the shape (drawn flat at a
    bucketed size and cut, so that a model's init compiles a few draws instead of one per weight shape),
    eagerly and under jit (against jax's draw under the same jit: XLA may fuse the scaling there), over
    a seeded grid of shapes (empty, scalar, 1-5 dims, around the buckets)."""
    rng = np.random.default_rng(7)
    shapes = [(0,), (), (1023,), (1025,), (3, 0, 2), (4097,)]
    shapes += [tuple(int(d) for d in rng.integers(1, 9, rng.integers(2, 5))) for _ in range(3)]
    if grid == "short":  # jax's own multi-dimensional draws compile slowly: one of them
        shapes = [(0,), (1025,), shapes[-1]]
    with jax.enable_x64(dtype == "float64"):
        for i, shape in enumerate(shapes):
            key = jax.random.key(i)
            a, b = (float(v) for v in sorted(rng.uniform(-3, 3, 2)))
            mean, std = float(rng.uniform(-1, 1)), float(rng.uniform(0, 2))

            def ours(k, s=shape, a=a, b=b, mean=mean, std=std):
                return J.uniform_(k, s, dtype, a, b), J.normal_(k, s, dtype, mean, std)

            def jaxs(k, s=shape, a=a, b=b, mean=mean, std=std):
                return (jax.random.uniform(k, s, dtype, minval=a, maxval=b),
                        mean + std * jax.random.normal(k, s, dtype))

            pairs = [(ours(key), jaxs(key))]
            if i in (2, len(shapes) - 1):  # under a trace the draw is jax's own: two shapes show it
                pairs.append((jax.jit(ours)(key), jax.jit(jaxs)(key)))
            for got, want in pairs:
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.shape == w.shape, shape
                    assert np.array_equal(np.asarray(g), np.asarray(w)), shape


def test_a_key_draw_cut_to_its_shape_keeps_only_its_own_size():
    """A key-based draw is made at a size rounded up (one compile serves many shapes) and cut on the host:
    the parameter owns a copy of its cut, so the larger draw is freed (1100 x 1000 is drawn from 4**11)."""
    import gc

    def live_bytes() -> int:
        gc.collect()
        return sum(a.nbytes for a in jax.live_arrays())

    before = live_bytes()
    w = J.uniform_(jax.random.key(0), (1100, 1000), a=-1.0, b=1.0)
    grown = live_bytes() - before
    assert w.nbytes <= grown < 2 * w.nbytes, (grown, w.nbytes)
