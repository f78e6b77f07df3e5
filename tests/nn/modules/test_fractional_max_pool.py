"""FractionalMaxPool2d/3d and F.fractional_max_pool2d/3d against torch on a seeded grid of kernels, output
sizes and ratios, batched and unbatched input, float32 and float64, with ties and NaN in the input.

Bit for bit (measured, no tolerance): outputs, indices and input gradients (the backward adds each output's
gradient at its index in torch's order), the window starts for float16/bfloat16 samples, and torch's global
generator after each call draws its ``rand(N, C, nd)`` samples (eagerly and under ``jax.jit``)."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jax_impl.nn as jnn
import jax_impl.nn.functional as F
import jax_impl.random as jr

_DTYPES = {"float32": (np.float32, torch.float32), "float64": (np.float64, torch.float64)}


def _same_stream() -> bool:
    return bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def _x64(dtype: str):
    return jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()


def _input(rng, shape, np_dtype):
    x = rng.standard_normal(shape).astype(np_dtype)
    flat = x.reshape(-1)
    flat[: flat.size // 3] = np.round(flat[: flat.size // 3])  # ties inside windows
    flat[rng.choice(flat.size, 2, replace=False)] = np.nan
    return x


def _compare(nd, x, kwargs, seed, np_dtype):
    """Run torch and jax_impl after the same seed; everything must agree bit for bit."""
    t_fn, j_fn = getattr(TF, f"fractional_max_pool{nd}d"), getattr(F, f"fractional_max_pool{nd}d")
    torch.manual_seed(seed)
    jr.manual_seed(seed)
    t_x = torch.tensor(x, requires_grad=True)
    t_y, t_i = t_fn(t_x, **kwargs, return_indices=True)
    g = np.random.default_rng(seed).standard_normal(tuple(t_y.shape)).astype(np_dtype)
    t_y.backward(torch.tensor(g))
    (y, i), vjp = jax.vjp(lambda v: j_fn(v, **kwargs, return_indices=True), jnp.asarray(x))
    assert _same_stream()
    np.testing.assert_array_equal(np.asarray(y), t_y.detach().numpy())
    np.testing.assert_array_equal(np.asarray(i), t_i.numpy())
    grad, = vjp((jnp.asarray(g), np.zeros(i.shape, jax.dtypes.float0)))
    np.testing.assert_array_equal(np.asarray(grad), t_x.grad.numpy())


# (nd, input shape, kwargs, dtype): output_size / output_ratio, square and rectangular kernels, unbatched
# input, an output of one window and one of every position (stride 1). Each geometry compiles its own
# program (about a second on a loaded 2-core host), so the default tier runs three and the slow tier the rest.
_CASES = [
    (2, (2, 3, 11, 9), dict(kernel_size=3, output_size=(5, 4)), "float32"),
    (2, (3, 10, 10), dict(kernel_size=(2, 3), output_ratio=(0.5, 0.7)), "float64"),
    (3, (2, 2, 7, 6, 8), dict(kernel_size=2, output_size=(3, 4, 2)), "float32"),
] + [pytest.param(*case, marks=pytest.mark.slow) for case in [
    (2, (2, 3, 11, 9), dict(kernel_size=3, output_size=(5, 4)), "float64"),
    (2, (3, 10, 10), dict(kernel_size=(2, 3), output_ratio=(0.5, 0.7)), "float32"),
    (2, (1, 2, 7, 8), dict(kernel_size=2, output_size=(6, 1)), "float32"),
    (2, (2, 2, 6, 5), dict(kernel_size=(1, 2), output_size=(6, 4)), "float64"),
    (3, (2, 2, 7, 6, 8), dict(kernel_size=2, output_size=(3, 4, 2)), "float64"),
    (3, (3, 9, 7, 6), dict(kernel_size=(3, 2, 2), output_ratio=0.5), "float32"),
    (3, (3, 9, 7, 6), dict(kernel_size=(3, 2, 2), output_ratio=0.5), "float64"),
    (3, (1, 1, 5, 5, 5), dict(kernel_size=(2, 1, 3), output_size=(1, 4, 2)), "float64"),
]]


@pytest.mark.parametrize(("nd", "shape", "kwargs", "dtype"), _CASES, ids=[f"case{i}" for i in range(len(_CASES))])
def test_drawn_samples_match_torch(nd, shape, kwargs, dtype):
    np_dtype = _DTYPES[dtype][0]
    with _x64(dtype):
        x = _input(np.random.default_rng(len(shape) * 7 + nd), shape, np_dtype)
        _compare(nd, x, kwargs, seed=11 + len(shape), np_dtype=np_dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(_DTYPES))
@pytest.mark.parametrize("nd", [2, 3])
def test_random_grid_matches_torch(nd, dtype):
    np_dtype = _DTYPES[dtype][0]
    rng = np.random.default_rng(nd)
    with _x64(dtype):
        # 8 random geometries per dimension and dtype (each compiles its own program, ~0.6 s) beside the 11
        # hand-picked _CASES: kernels 1-4 per axis, outputs from one window to one per position, batched
        # and unbatched input, all drawn; CI's slow tier has a budget.
        for case in range(8):
            spatial = tuple(int(v) for v in rng.integers(3, 14, nd))
            # The 3-d kernel wants out + k - 1 < size (strictly), the 2-d one <=.
            strict = int(nd == 3)
            kernel = tuple(int(rng.integers(1, min(4, s - strict) + 1)) for s in spatial)
            out = tuple(int(rng.integers(1, s - k + 2 - strict)) for s, k in zip(spatial, kernel))
            lead = (int(rng.integers(1, 3)), int(rng.integers(1, 4)))[int(rng.integers(0, 2)):]
            x = _input(rng, lead + spatial, np_dtype)
            _compare(nd, x, dict(kernel_size=kernel, output_size=out), seed=case, np_dtype=np_dtype)


_HALF_CASES = [("float16", (3, 2), (7, 9))] + [pytest.param(*case, marks=pytest.mark.slow) for case in [
    ("float16", (2, 5), (59, 4)), ("float16", (1, 1), (13, 36)),
    ("bfloat16", (3, 2), (7, 9)), ("bfloat16", (2, 5), (59, 4)), ("bfloat16", (1, 1), (13, 36))]]


@pytest.mark.parametrize(("dtype", "kernel", "out"), _HALF_CASES, ids=[f"case{i}" for i in range(len(_HALF_CASES))])
def test_given_samples_in_half_precision_place_windows_as_torch(dtype, kernel, out):
    # A strictly increasing plane: every window's maximum is its last element, so the indices spell out
    # the starts that generate_intervals computed in c10::Half / c10::BFloat16 arithmetic (bfloat16's
    # plane has ties, which the first maximum resolves as torch).
    t_dtype = getattr(torch, dtype)
    h, w, c = 60, 37, 48
    x = torch.arange(h * w, dtype=torch.float64).reshape(1, 1, h, w).expand(2, c, h, w).to(t_dtype)
    u = torch.rand(2, c, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(t_dtype)
    t_y, t_i = TF.fractional_max_pool2d(x, kernel, output_size=out, _random_samples=u, return_indices=True)
    y, i = F.fractional_max_pool2d(jnp.asarray(x.float().numpy()).astype(dtype), kernel, output_size=out,
                                   _random_samples=jnp.asarray(u.float().numpy()).astype(dtype), return_indices=True)
    np.testing.assert_array_equal(np.asarray(i), t_i.numpy())
    np.testing.assert_array_equal(np.asarray(y.astype(jnp.float32)), t_y.float().numpy())


def test_module_under_jit_draws_torchs_samples_at_each_call():
    x = np.random.default_rng(0).standard_normal((2, 3, 11, 9)).astype(np.float32)
    torch.manual_seed(1)
    jr.manual_seed(1)
    theirs = torch.nn.FractionalMaxPool2d(2, output_ratio=0.5, return_indices=True)
    ours = jnn.FractionalMaxPool2d(2, output_ratio=0.5, return_indices=True)
    step = jax.jit(lambda v: ours(v))
    for _ in range(3):
        (t_y, t_i), (y, i) = theirs(torch.tensor(x)), step(jnp.asarray(x))
        np.testing.assert_array_equal(np.asarray(y), t_y.numpy())
        np.testing.assert_array_equal(np.asarray(i), t_i.numpy())
    assert _same_stream()


def test_module_keeps_given_samples():
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 6, 8))
    u = np.random.default_rng(3).random((2, 3, 3))
    with jax.enable_x64(True):
        theirs = torch.nn.FractionalMaxPool3d(2, output_size=(3, 2, 4), _random_samples=torch.tensor(u))
        ours = jnn.FractionalMaxPool3d(2, output_size=(3, 2, 4), _random_samples=u)
        state = jr.get_rng_state()
        np.testing.assert_array_equal(np.asarray(ours(jnp.asarray(x))), theirs(torch.tensor(x)).numpy())
        assert bytes(jr.get_rng_state()) == bytes(state)  # nothing drawn
        assert ours.kernel_size == theirs.kernel_size and ours.output_size == theirs.output_size
        np.testing.assert_array_equal(np.asarray(ours._random_samples[...]), theirs._random_samples.numpy())


_X2, _X3 = np.zeros((2, 3, 8, 8), np.float32), np.zeros((2, 3, 8, 8, 8), np.float32)
_ERRORS = [
    (2, _X2, dict(kernel_size=3)),
    (2, _X2, dict(kernel_size=3, output_ratio=(0.5, 0.5, 0.5))),
    (2, _X2, dict(kernel_size=3, output_ratio=0.5)),
    (2, _X2, dict(kernel_size=7, output_size=3)),
    (2, _X2, dict(kernel_size=(2, 4), output_size=(2, 6))),
    (2, _X2, dict(kernel_size=3, output_size=(2, 2, 2))),
    (2, _X2, dict(kernel_size=(3, 3, 3), output_size=2)),
    (2, _X2, dict(kernel_size=3, output_size=-1)),
    (2, np.zeros((8, 8), np.float32), dict(kernel_size=3, output_size=2)),
    (2, np.zeros((2, 2, 8, 8, 8), np.float32), dict(kernel_size=3, output_size=2)),
    (2, np.zeros((2, 0, 8, 8), np.float32), dict(kernel_size=3, output_size=2)),
    (2, _X2, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((2, 3, 2)))),
    (2, _X2, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((1, 3, 2), np.float32))),
    (2, _X2, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((2, 4, 2), np.float32))),
    (2, _X2, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((2, 3, 3), np.float32))),
    (2, _X2, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((2, 3), np.float32))),
    (3, _X3, dict(kernel_size=3)),
    (3, _X3, dict(kernel_size=3, output_size=6)),
    (3, _X3, dict(kernel_size=(2, 2, 3), output_size=(2, 2, 6))),
    (3, _X3, dict(kernel_size=(2, 3, 2), output_size=(2, 6, 2))),
    (3, _X3, dict(kernel_size=3, output_size=(2, 2))),
    (3, _X3, dict(kernel_size=3, output_ratio=(0.5, 0.5))),
    (3, np.zeros((8, 8, 8), np.float32), dict(kernel_size=3, output_size=2)),
    (3, _X3, dict(kernel_size=3, output_size=2, _random_samples=np.zeros((2, 3, 2), np.float32))),
]


@pytest.mark.parametrize(("nd", "x", "kwargs"), _ERRORS, ids=[str(i) for i in range(len(_ERRORS))])
def test_errors_are_torchs(nd, x, kwargs):
    """The same exception type and message as torch, and the generator where torch leaves it."""
    torch_kwargs = dict(kwargs)
    if "_random_samples" in kwargs:
        torch_kwargs["_random_samples"] = torch.tensor(kwargs["_random_samples"])
    torch.manual_seed(0)
    jr.manual_seed(0)
    with pytest.raises(Exception) as theirs:
        getattr(TF, f"fractional_max_pool{nd}d")(torch.tensor(x), **torch_kwargs)
    with jax.enable_x64(True), pytest.raises(type(theirs.value)) as ours:  # float64 samples stay float64
        getattr(F, f"fractional_max_pool{nd}d")(jnp.asarray(x), **kwargs)
    assert str(ours.value) == str(theirs.value)
    assert _same_stream()


def test_module_arguments_are_checked_as_torch():
    for make in [lambda m: m.FractionalMaxPool2d(3), lambda m: m.FractionalMaxPool2d(3, 2, 0.5),
                 lambda m: m.FractionalMaxPool2d(3, output_ratio=1.0), lambda m: m.FractionalMaxPool3d(0, 2),
                 lambda m: m.FractionalMaxPool3d((2, 0, 1), output_ratio=0.5)]:
        with pytest.raises(ValueError) as theirs:
            make(torch.nn)
        with pytest.raises(ValueError, match=None) as ours:
            make(jnn)
        assert str(ours.value) == str(theirs.value)


def test_empty_outputs_and_unsupported_kernels():
    y, i = F.fractional_max_pool2d(jnp.zeros((0, 3, 8, 8)), 3, output_size=2, return_indices=True)
    assert y.shape == i.shape == (0, 3, 2, 2)
    assert F.fractional_max_pool2d(jnp.zeros((2, 3, 8, 8)), 3, output_size=0).shape == (2, 3, 0, 0)
    with pytest.raises(NotImplementedError, match="kernel_size"):
        F.fractional_max_pool2d(jnp.zeros((1, 1, 8, 8)), 0, output_size=2)
    with pytest.raises(NotImplementedError, match="float16"):
        F.fractional_max_pool2d(jnp.zeros((1, 1, 8, 8), jnp.float16), 2, output_size=2)


def test_ports():
    import parity.port

    source = parity.port.port_source(torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.FractionalMaxPool2d(2, output_ratio=0.5),
        torch.nn.FractionalMaxPool2d(3, output_size=4, return_indices=True)))
    assert "nn.FractionalMaxPool2d((2, 2), output_ratio=(0.5, 0.5))" in source
    assert "nn.FractionalMaxPool2d((3, 3), output_size=(4, 4), return_indices=True)" in source
