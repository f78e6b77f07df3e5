"""Weight and spectral normalisation, hook and parametrization forms, against torch.nn.utils.

Each case builds the torch layer and its jax_impl twin after the same seed (so spectral norm's ``u``/``v``
draws and its 15 registration steps are compared too), then compares the state dicts, three training-mode
calls (outputs, and the power iteration's buffers after them), the gradients of a seeded weighting of the
outputs, an eval-mode call, and the parameter ``remove_*`` leaves.

Tolerances: float64 within 1e-12 (measured at most 3e-15 relative); float32 within 1e-5 relative and absolute
(measured 2.2e-6: the power iteration's products and the norms sum in another order than MKL's and ATen's).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import jax_impl.random
from jax_impl import nn as jnn
from parity.convert import module_state
from tests._tiers import slow_except

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
JAX_DTYPE = {torch.float64: jnp.float64, torch.float32: jnp.float32}

# (layer, constructor arguments, input shape; None: an embedding's indices)
LAYERS = {
    "Linear": ((4, 6), (3, 4)),
    "Conv1d": ((3, 4, 3), (2, 3, 7)),
    "Conv2d": ((3, 5, 3), (2, 3, 6, 6)),
    "ConvTranspose2d": ((3, 4, 3), (2, 3, 4, 4)),
    "Embedding": ((7, 5), None),
}

# (form, layer, keyword arguments): every layer under every form, dims and power steps drawn by a seeded grid.
_rng = np.random.default_rng(0)
CASES = []
for _form in ("spectral_norm", "weight_norm", "parametrizations.spectral_norm", "parametrizations.weight_norm"):
    for _layer in LAYERS:
        if "spectral" in _form:
            _kwargs = {"n_power_iterations": int(_rng.integers(1, 4)), "eps": float(_rng.choice([1e-12, 1e-4]))}
            if _rng.random() < 0.4:
                _kwargs["dim"] = 1
        else:
            _kwargs = {"dim": [0, 1, None][int(_rng.integers(0, 3))]}
        CASES.append((_form, _layer, _kwargs))
# The default tier runs two cases in float64; the slow tier the rest, and one case of each form in float32.
DEFAULT_TIER = {("spectral_norm", "Conv2d"), ("parametrizations.weight_norm", "Conv1d")}
FLOAT32 = DEFAULT_TIER | {("weight_norm", "Linear"), ("parametrizations.spectral_norm", "ConvTranspose2d")}


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _apply(utils, form: str):
    for part in form.split("."):
        utils = getattr(utils, part)
    return utils


def _pair(form: str, layer: str, kwargs: dict, dtype: torch.dtype, seed: int = 0):
    args, _ = LAYERS[layer]
    torch.manual_seed(seed)
    jax_impl.random.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the hook form of weight_norm
        t = _apply(torch.nn.utils, form)(getattr(torch.nn, layer)(*args, dtype=dtype), **kwargs)
    j = _apply(jnn.utils, form)(getattr(jnn, layer)(*args, dtype=JAX_DTYPE[dtype]), **kwargs)
    return t, j


def _input(layer: str, dtype: torch.dtype) -> torch.Tensor:
    args, shape = LAYERS[layer]
    if shape is None:
        return torch.randint(0, args[0], (3, 4))
    return torch.randn(*shape, dtype=dtype)


def _close(actual, expected, dtype, what: str) -> None:
    tol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(actual), expected.detach().numpy(), rtol=tol, atol=tol, err_msg=what)


def _check_state(t, j, dtype, when: str) -> None:
    theirs, ours = t.state_dict(), module_state(j)
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    for key, value in theirs.items():
        _close(ours[key][...], value, dtype, f"{key} {when}")


GRID = [(*case, dtype) for case in CASES for dtype in (torch.float64, torch.float32)
        if dtype == torch.float64 or case[:2] in FLOAT32]


@pytest.mark.parametrize(("form", "layer", "kwargs", "dtype"),
                         slow_except(GRID, lambda case: case[:2] in DEFAULT_TIER and case[3] == torch.float64,
                                     several=True, ids=[f"{f}-{layer}-{str(d)[6:]}" for f, layer, _, d in GRID]))
def test_matches_torch(form, layer, kwargs, dtype):
    t, j = _pair(form, layer, kwargs, dtype)
    _check_state(t, j, dtype, "after registration")
    x = _input(layer, dtype)
    xj = jnp.asarray(x.numpy())
    for call in range(3):
        _close(j(xj), t(x), dtype, f"train-mode call {call}")
    _check_state(t, j, dtype, "after three training-mode calls")

    weights = torch.randn(t(x).shape, dtype=dtype)
    j(xj)  # the same training-mode call (one more power iteration) as torch's above
    t.zero_grad()
    (t(x) * weights).sum().backward()
    grads = nnx.grad(lambda m: (m(xj) * jnp.asarray(weights.numpy())).sum())(j)
    ours = {".".join(map(str, path)): v[...] for path, v in nnx.to_flat_state(grads)}
    for name, param in t.named_parameters():
        _close(ours[name], param.grad, dtype, f"gradient of {name}")
    _check_state(t, j, dtype, "after the gradient's call")

    t.eval()
    j.eval()
    _close(j(xj), t(x), dtype, "eval-mode call")
    _check_state(t, j, dtype, "after an eval-mode call")

    name = kwargs.get("name", "weight")
    if form.startswith("parametrizations"):
        torch.nn.utils.parametrize.remove_parametrizations(t, name)
        jnn.utils.parametrize.remove_parametrizations(j, name)
    else:
        getattr(torch.nn.utils, f"remove_{form}")(t, name)
        getattr(jnn.utils, f"remove_{form}")(j, name)
    assert type(j) is getattr(jnn, layer)
    _check_state(t, j, dtype, "after remove")


def test_train_step_updates_the_power_iteration_buffers():
    """Two SGD steps of a spectrally normalised discriminator through ``jax_impl.train.train_step``."""
    from jax_impl import optim
    from jax_impl.train import init_train_state, merge_model, train_step

    def build(lib, sn, dtype):
        return lib.Sequential(sn(lib.Conv2d(1, 4, 3, stride=2, dtype=dtype)), lib.LeakyReLU(0.2), lib.Flatten(),
                              sn(lib.Linear(144, 1, dtype=dtype)))

    torch.manual_seed(1)
    jax_impl.random.manual_seed(1)
    t = build(torch.nn, torch.nn.utils.parametrizations.spectral_norm, torch.float64)
    j = build(jnn, jnn.utils.parametrizations.spectral_norm, jnp.float64)
    graphdef, state = init_train_state(j, optim.sgd(0.1, momentum=0.9))
    step = train_step(graphdef, jnn.MSELoss(), optim.sgd(0.1, momentum=0.9))
    opt = torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        x, y = torch.randn(4, 1, 13, 13, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
        opt.zero_grad()
        torch.nn.functional.mse_loss(t(x), y).backward()
        opt.step()
        state, _ = step(state, jnp.asarray(x.numpy()), jnp.asarray(y.numpy()))
    _check_state(t, merge_model(graphdef, state), torch.float64, "after two SGD steps")


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch deprecates the hook form of weight_norm
def test_errors_match_torch():
    for form in ("spectral_norm", "weight_norm"):
        t = getattr(torch.nn.utils, form)(torch.nn.Linear(2, 3))
        j = getattr(jnn.utils, form)(jnn.Linear(2, 3))
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.nn.utils, form)(t)
        with pytest.raises(RuntimeError, match=f"Cannot register two {form} hooks on the same parameter weight"):
            getattr(jnn.utils, form)(j)
        assert f"Cannot register two {form} hooks" in str(theirs.value)
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive, but got n_power_iterations=0"):
        jnn.utils.spectral_norm(jnn.Linear(2, 3), n_power_iterations=0)
    with pytest.raises(ValueError, match="spectral_norm of 'weight' not found"):
        jnn.utils.remove_spectral_norm(jnn.Linear(2, 3))
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'kernel'"):
        jnn.utils.parametrizations.spectral_norm(jnn.Linear(2, 3), name="kernel")
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\] but got 2\)"):
        jnn.utils.parametrizations.spectral_norm(jnn.Linear(2, 3), dim=2)
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        jnn.utils.parametrize.remove_parametrizations(jnn.Linear(2, 3), "weight")


def test_jit_and_a_second_parametrization():
    """Equal layers share a class (one compiled program); a second parametrization on the same tensor is
    applied after the first, as torch's list."""
    a = jnn.utils.parametrizations.spectral_norm(jnn.Linear(3, 3, dtype=jnp.float64))
    b = jnn.utils.parametrizations.spectral_norm(jnn.Linear(3, 3, dtype=jnp.float64))
    assert type(a) is type(b) and type(a).__name__ == "ParametrizedLinear"
    assert nnx.graphdef(a) == nnx.graphdef(b)

    class Double(jnn.Module):
        def __call__(self, w):
            return 2 * w

    class TorchDouble(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    torch.manual_seed(0)
    jax_impl.random.manual_seed(0)
    t = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 2, dtype=torch.float64))
    j = jnn.utils.parametrizations.weight_norm(jnn.Linear(3, 2, dtype=jnp.float64))
    torch.nn.utils.parametrize.register_parametrization(t, "weight", TorchDouble())
    jnn.utils.parametrize.register_parametrization(j, "weight", Double())
    x = torch.randn(4, 3, dtype=torch.float64)
    _close(nnx.jit(lambda m, x: m(x))(j, jnp.asarray(x.numpy())), t(x), torch.float64, "two parametrizations")


def test_pickles_and_stacks_as_torchs():
    """A module with a hook form pickles (its class is found again by name, also in a process that has not
    made it yet); a second parametrization form stacks on a parametrized tensor, as torch's list."""
    import pickle

    from jax_impl.nn.utils import _weight_hooks

    j = jnn.utils.spectral_norm(jnn.Linear(3, 2, dtype=jnp.float64))
    x = jnp.ones((1, 3), jnp.float64)
    data = pickle.dumps(j)
    _weight_hooks._CLASSES.clear()  # as in a fresh process: the class is made again on lookup
    loaded = pickle.loads(data)
    assert type(loaded).__name__ == "Linear" and type(loaded) is not type(j)
    np.testing.assert_array_equal(np.asarray(loaded.eval()(x)), np.asarray(j.eval()(x)))

    torch.manual_seed(2)
    jax_impl.random.manual_seed(2)
    t = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 4, dtype=torch.float64))
    torch.nn.utils.parametrizations.spectral_norm(t)
    j = jnn.utils.parametrizations.weight_norm(jnn.Linear(3, 4, dtype=jnp.float64))
    jnn.utils.parametrizations.spectral_norm(j)
    _check_state(t, j, torch.float64, "after weight_norm then spectral_norm")
    _close(j(jnp.asarray(np.ones((2, 3)))), t(torch.ones(2, 3, dtype=torch.float64)), torch.float64, "stacked")


def test_bad_arguments_raise_torchs_errors():
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        jnn.utils.weight_norm(jnn.Linear(2, 3), dim=2)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 1\)"):
        jnn.functional.normalize(jnp.ones(3), dim=1)
    with pytest.raises(KeyError, match="attribute 'training' already exists"):
        jnn.ModuleDict({"training": jnn.Linear(2, 2)})
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        jnn.ModuleDict({"a": 3})
