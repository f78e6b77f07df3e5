"""jax_impl.distributions against torch.distributions: the same seed gives the same samples, bit for bit, and
leaves the global generators in the same state; log_prob and entropy agree to float rounding.

Seeded grids of parameter shapes, sample shapes and dtypes; each case draws ``sample`` and ``rsample``
(where torch has it) in turn, so that the draws interleave as a training loop's do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.distributions as td

import jax_impl.distributions as jd
import jax_impl.random as jr
from tests._tiers import slow_except

_DTYPES = [(np.float32, torch.float32, 1e-6), (np.float64, torch.float64, 1e-13)]
# The two grids that sample most (every continuous family, Categorical's shapes) run float64, the tight bar, in
# the default tier and float32 in the slow tier (the default tier's time budget).
_DTYPES_F64_FIRST = slow_except(_DTYPES, lambda case: case[0] is np.float64, ids=["float32", "float64"], several=True)
_SAMPLE_SHAPES = [(), (1,), (5,), (3, 7), (17,)]


def _seed(s: int) -> None:
    torch.manual_seed(s)
    jr.manual_seed(s)


def _same(ours, theirs: torch.Tensor) -> None:
    ours = np.asarray(ours)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours, theirs.detach().numpy())


def _states_equal() -> None:
    assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def _close(ours, theirs: torch.Tensor, tol: float) -> None:
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=tol, atol=tol)


def _params(rng, shape, np_dtype, low=None, high=None):
    values = rng.uniform(low if low is not None else -2, high if high is not None else 2, shape).astype(np_dtype)
    return values, torch.from_numpy(values.copy())


@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), _DTYPES_F64_FIRST)
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_continuous_samplers_match_torch(np_dtype, torch_dtype, tol, batch):
    """Normal, Uniform and Exponential: sample and rsample of every sample shape, log_prob and entropy."""
    with jax.enable_x64(np_dtype == np.float64):
        rng = np.random.default_rng(len(batch))
        loc, t_loc = _params(rng, batch, np_dtype)
        scale, t_scale = _params(rng, batch, np_dtype, 0.1, 3)
        low, t_low = _params(rng, batch, np_dtype, -3, 0)
        high, t_high = _params(rng, batch, np_dtype, 0.5, 4)
        pairs = [(jd.Normal(loc, scale), td.Normal(t_loc, t_scale)),
                 (jd.Uniform(low, high), td.Uniform(t_low, t_high)),
                 (jd.Exponential(scale), td.Exponential(t_scale))]
        _seed(3)
        for ours, theirs in pairs:
            for shape in _SAMPLE_SHAPES:
                _same(ours.sample(shape), theirs.sample(shape))
                _same(ours.rsample(shape), theirs.rsample(shape))
                _states_equal()
            with torch.random.fork_rng(devices=[]):  # values to score, drawn off both streams
                value = theirs.sample((6,))
            _close(ours.log_prob(value.numpy()), theirs.log_prob(value), tol)
            _close(ours.entropy(), theirs.entropy(), tol)


def test_scalar_parameters_take_torchs_default_dtype():
    _seed(0)
    _same(jd.Normal(0.5, 2.0).sample((20,)), td.Normal(0.5, 2.0).sample((20,)))
    _same(jd.Normal(0.0, 1.0).rsample((3,)), td.Normal(0.0, 1.0).rsample((3,)))
    _same(jd.Bernoulli(0.3).sample((40,)), td.Bernoulli(0.3).sample((40,)))
    _same(jd.Exponential(2.0).sample((5,)), td.Exponential(2.0).sample((5,)))
    _states_equal()


@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), _DTYPES, ids=["float32", "float64"])
def test_bernoulli_matches_torch_from_probs_and_logits(np_dtype, torch_dtype, tol):
    with jax.enable_x64(np_dtype == np.float64):
        rng = np.random.default_rng(1)
        probs, t_probs = _params(rng, (3, 4), np_dtype, 0, 1)
        logits, t_logits = _params(rng, (5,), np_dtype, -4, 4)
        _seed(8)
        for shape in _SAMPLE_SHAPES:
            _same(jd.Bernoulli(probs).sample(shape), td.Bernoulli(t_probs).sample(shape))
            # From logits torch samples sigmoid(logits): equal probabilities to rounding, so equal draws
            # unless a uniform falls between the two roundings (none in these draws).
            _same(jd.Bernoulli(logits=logits).sample(shape), td.Bernoulli(logits=t_logits).sample(shape))
            _states_equal()
        with torch.random.fork_rng(devices=[]):
            value = td.Bernoulli(t_probs).sample()
        _close(jd.Bernoulli(probs).log_prob(value.numpy()), td.Bernoulli(t_probs).log_prob(value), tol * 10)
        _close(jd.Bernoulli(probs).entropy(), td.Bernoulli(t_probs).entropy(), tol * 10)


@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), _DTYPES_F64_FIRST)
@pytest.mark.parametrize("batch", [(), (2, 2)])
def test_categorical_matches_torch(np_dtype, torch_dtype, tol, batch):
    """One sample per distribution (multinomial's exponential path) and several (its cumulative path), as a
    policy gradient's ``Categorical(probs).sample()`` draws them; log_prob of the actions and entropy."""
    with jax.enable_x64(np_dtype == np.float64):
        rng = np.random.default_rng(len(batch) + 10)
        probs, t_probs = _params(rng, (*batch, 6), np_dtype, 0.01, 1)
        _seed(21)
        for shape in _SAMPLE_SHAPES:
            _same(jd.Categorical(probs).sample(shape), td.Categorical(t_probs).sample(shape))
            _states_equal()
        with torch.random.fork_rng(devices=[]):
            actions = td.Categorical(t_probs).sample((4,))
        _close(jd.Categorical(probs).log_prob(actions.numpy()), td.Categorical(t_probs).log_prob(actions), tol)
        _close(jd.Categorical(probs).entropy(), td.Categorical(t_probs).entropy(), tol)
        logits, t_logits = _params(rng, (*batch, 5), np_dtype)
        _close(jd.Categorical(logits=logits).entropy(), td.Categorical(logits=t_logits).entropy(), tol)


@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), _DTYPES, ids=["float32", "float64"])
def test_multivariate_normal_draws_torchs_noise(np_dtype, torch_dtype, tol):
    """The noise is torch's bit for bit (equal generator states); ``loc + L @ eps`` agrees to the matrix
    product's rounding (measured below 1e-6 in float32, 1e-15 in float64: the bound is ``tol``)."""
    with jax.enable_x64(np_dtype == np.float64):
        rng = np.random.default_rng(4)
        a = rng.standard_normal((3, 3)).astype(np_dtype)
        cov = (a @ a.T + 3 * np.eye(3)).astype(np_dtype)
        loc = rng.standard_normal((2, 3)).astype(np_dtype)
        ours = jd.MultivariateNormal(loc, covariance_matrix=cov)
        theirs = td.MultivariateNormal(torch.from_numpy(loc), covariance_matrix=torch.from_numpy(cov))
        _seed(5)
        for shape in _SAMPLE_SHAPES:
            _close(ours.rsample(shape), theirs.rsample(shape), tol * 10)
            _states_equal()
        with torch.random.fork_rng(devices=[]):
            value = theirs.sample((4,))
        _close(ours.log_prob(value.numpy()), theirs.log_prob(value), tol * 10)
        _close(ours.entropy(), theirs.entropy(), tol * 10)


def test_validation_and_tracing_errors():
    with pytest.raises(ValueError, match=r"Expected parameter scale .* GreaterThan\(lower_bound=0.0\)"):
        jd.Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both."):
        jd.Bernoulli()
    with pytest.raises(ValueError, match=r"Expected parameter probs"):
        jd.Bernoulli(np.array([0.5, 1.5], np.float32))
    with pytest.raises(ValueError, match="`probs` parameter must be at least one-dimensional."):
        jd.Categorical(np.float32(0.5))
    assert jd.Normal(0.0, -1.0, validate_args=False).batch_shape == ()
    with pytest.raises(NotImplementedError, match="draws torch's numbers on the host"):
        jax.jit(lambda m: jd.Normal(m, 1.0).rsample((2,)))(jnp.zeros(()))
    # rsample is differentiable in the parameters; the noise is a constant.
    grad = jax.grad(lambda m: jd.Normal(m, 2.0).rsample((3,)).sum())(jnp.float32(0.5))
    assert float(grad) == 3.0


@pytest.mark.parametrize(("np_dtype", "torch_dtype", "tol"), _DTYPES, ids=["float32", "float64"])
def test_the_other_parameter_is_computed_when_read_as_torchs(np_dtype, torch_dtype, tol):
    """Categorical and Bernoulli keep the parameter they are given; the other one (``logits`` of ``probs``,
    ``probs`` of ``logits``) is torch's lazy property: absent until read, then kept, with torch's values."""
    with jax.enable_x64(np_dtype == np.float64):
        rng = np.random.default_rng(7)
        probs, t_probs = _params(rng, (3, 4), np_dtype, 0.01, 1)
        logits, t_logits = _params(rng, (3, 4), np_dtype)
        pairs = [(jd.Categorical(probs), td.Categorical(t_probs), "logits"),
                 (jd.Categorical(logits=logits), td.Categorical(logits=t_logits), "probs"),
                 (jd.Bernoulli(probs), td.Bernoulli(t_probs), "logits"),
                 (jd.Bernoulli(logits=logits), td.Bernoulli(logits=t_logits), "probs")]
        for ours, theirs, lazy in pairs:
            assert lazy not in vars(theirs)
            assert lazy not in vars(ours)
            _close(getattr(ours, lazy), getattr(theirs, lazy), tol)
            assert lazy in vars(ours) and getattr(ours, lazy) is getattr(ours, lazy)


def test_a_lazy_parameter_read_under_jit_stays_in_that_trace():
    """Built outside ``jax.jit`` and first read inside it, ``logits`` is not kept (it is that trace's value):
    a later eager read, a retrace and a sample all work, with torch's values."""
    probs = np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], np.float32)
    ours, theirs = jd.Categorical(probs), td.Categorical(torch.from_numpy(probs))
    log_prob = jax.jit(lambda v: ours.log_prob(v))
    actions = np.array([0, 2])
    _close(log_prob(actions), theirs.log_prob(torch.from_numpy(actions)), 1e-6)
    assert "logits" not in vars(ours)
    _close(ours.entropy(), theirs.entropy(), 1e-6)
    _close(log_prob(actions[:, None]), theirs.log_prob(torch.from_numpy(actions[:, None])), 1e-6)
    bernoulli = jd.Bernoulli(logits=np.zeros(3, np.float32))
    jax.jit(lambda: bernoulli.mean)()
    _seed(3)
    _same(bernoulli.sample(), td.Bernoulli(logits=torch.zeros(3)).sample())
