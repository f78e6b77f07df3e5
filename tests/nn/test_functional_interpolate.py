"""F.interpolate against torch: modes x align_corners x size / scale_factor x recompute_scale_factor x dtypes,
forward and input gradient, and torch's errors.

float64: forward and gradient within 1e-12 of torch (measured at most 5.1e-16 relative forward, with
antialias, and 1.2e-15 gradient: torch's scatter order).
float32 forward: bit-identical to torch for nearest, nearest-exact, linear, bilinear and trilinear (the index and
weight tables follow torch's fused multiply-adds; see jax_impl/nn/_functional_interpolate.py); bicubic on the
seeded grid too, but 1 ULP off (8.6e-8 relative) where a downsampling gives every output the same weights and
XLA regroups the sum, so its bar is 2e-7; antialias measured 3.7e-7 relative (its weights are normalised by a
float sum), area (the adaptive average pool) 8.7e-8. float32 gradients are sums torch accumulates in its own
scatter order: measured at most 6.6e-7 relative; bar 2e-6.
"""

from __future__ import annotations

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl.nn import functional as F
from tests.nn.modules._torch_pair import input_grad, rel_err, torch_input_grad

_SHAPES = {3: (2, 3, 7), 4: (2, 3, 6, 5), 5: (1, 2, 4, 3, 5)}
_MODES = {3: ["nearest", "nearest-exact", "linear", "area"],
          4: ["nearest", "nearest-exact", "bilinear", "bicubic", "area"],
          5: ["nearest", "nearest-exact", "trilinear", "area"]}
_SPECS = [dict(size=9), dict(size=3), dict(size=1), dict(scale_factor=2), dict(scale_factor=1.7),
          dict(scale_factor=0.6), dict(scale_factor=2.3), dict(scale_factor=3),
          dict(scale_factor=1.7, recompute_scale_factor=True), dict(scale_factor=0.6, recompute_scale_factor=False)]
_EXACT32 = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear")


def _compare(shape, dtype, seed, jit=False, **kw):
    """(forward rel err, gradient rel err, bit-identical forward) of ours against torch's.

    ``jit``: forward and gradient as one compiled function; eagerly, each op compiles on its own
    for every new output size (about twice the CPU time over the slow grid).
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, (t_grad,) = torch_input_grad(lambda t: torch.nn.functional.interpolate(t, **kw), x)

    def ours_and_grad(a):
        return input_grad(lambda b: F.interpolate(b, **kw), a)

    ours, (grad,) = (jax.jit(ours_and_grad) if jit else ours_and_grad)(jnp.asarray(x))
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    return rel_err(ours, theirs), rel_err(grad, t_grad), np.array_equal(np.asarray(ours), theirs)


def _cases(nd):
    """Two seeded size / scale_factor specs per mode and align_corners (the full product is minutes of
    compiling), and the antialias modes."""
    rng = np.random.default_rng(nd)
    for mode in _MODES[nd]:
        corners = [None] if mode in ("nearest", "nearest-exact", "area") else [False, True]
        for align_corners in corners:
            for i in rng.choice(len(_SPECS), 2, replace=False):
                if mode == "area" and _SPECS[i].get("recompute_scale_factor") is False:
                    continue  # area always recomputes; torch accepts the flag and ignores it
                yield dict(mode=mode, align_corners=align_corners, **_SPECS[i])
    if nd == 4:
        for mode, align_corners, spec in [("bilinear", False, dict(size=3)), ("bilinear", True, dict(size=(9, 4))),
                                          ("bicubic", False, dict(scale_factor=0.3)),
                                          ("bicubic", True, dict(scale_factor=1.7))]:
            yield dict(mode=mode, align_corners=align_corners, antialias=True, **spec)


def _check(nd, dtype, kw, seed, jit=False):
    with jax.enable_x64(True):
        fwd, bwd, same = _compare(_SHAPES[nd], dtype, seed, jit=jit, **kw)
    if dtype == np.float64:
        assert fwd <= 1e-12 and bwd <= 1e-12, (kw, fwd, bwd)
    else:
        if kw["mode"] in _EXACT32 and not kw.get("antialias"):
            assert same, (kw, fwd)
        assert fwd <= (2e-7 if kw["mode"] == "bicubic" and not kw.get("antialias") else 2e-6), (kw, fwd)
        assert bwd <= 2e-6, (kw, bwd)


# A few cases in the default tier (each compiles); every mode and route is in the slow grid.
_QUICK = [
    (4, dict(mode="nearest", scale_factor=2)), (3, dict(mode="linear", align_corners=False, scale_factor=1.7)),
    (5, dict(mode="trilinear", align_corners=True, size=3)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("nd", "kw"), _QUICK)
def test_modes_match_torch(nd, kw, dtype):
    _check(nd, dtype, kw, seed=len(str(kw)))


@pytest.mark.slow  # every mode, antialias and area: ~80 cases, each compiled
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("nd", [3, 4, 5])
def test_grid_matches_torch(nd, dtype):
    """The grid under jax.jit (the same bars, bit-identity included); test_modes_match_torch runs eagerly."""
    for i, kw in enumerate(_cases(nd)):
        _check(nd, dtype, kw, seed=i, jit=True)


@jax.enable_x64(True)
def test_bilinear_kernels_by_output_size_and_channels():
    """torch's 2-d bilinear takes its channels-last kernel for small outputs, whose vectorised channels (32-byte
    lanes) and tail channels sum differently, and its generic kernel for large ones: bit-identical in both."""
    rng = np.random.default_rng(3)
    for dtype, channels, size in [(np.float32, 11, (9, 11)), (np.float64, 5, (13, 7)), (np.float32, 2, (80, 70))]:
        x = rng.standard_normal((2, channels, 6, 5)).astype(dtype)
        theirs = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="bilinear").numpy()
        np.testing.assert_array_equal(np.asarray(F.interpolate(jnp.asarray(x), size=size, mode="bilinear")), theirs)


@jax.enable_x64(True)
def test_nearest_gradient_follows_torchs_backward_indices():
    """3 -> 6 with scale_factor=2.3: torch's forward indexes with 1/2.3, its backward with the exact 2x rule."""
    x = np.arange(3.0).reshape(1, 1, 3)
    _, (grad,) = input_grad(lambda a: F.interpolate(a, scale_factor=2.3), jnp.asarray(x))
    _, (t_grad,) = torch_input_grad(lambda t: torch.nn.functional.interpolate(t, scale_factor=2.3), x)
    np.testing.assert_array_equal(np.asarray(grad), t_grad)


def test_reduced_precision_is_bit_identical():
    """bfloat16 / float16: float32 arithmetic on torch's tables, the generic kernel's weights stored in the
    input's dtype (measured bit-identical for every mode); antialias refuses them, as torch."""
    rng = np.random.default_rng(5)
    for (shape, size, mode), (t_dtype, j_dtype) in itertools.product(
            [((1, 3, 6, 5), (9, 7), "bicubic"), ((2, 3, 7), (15,), "linear"), ((1, 2, 3, 4, 5), (5, 6, 7), "trilinear")],
            [(torch.bfloat16, jnp.bfloat16), (torch.float16, jnp.float16)]):
        x = rng.standard_normal(shape).astype(np.float32)
        theirs = torch.nn.functional.interpolate(torch.tensor(x).to(t_dtype), size=size, mode=mode).float().numpy()
        ours = F.interpolate(jnp.asarray(x, j_dtype), size=size, mode=mode)
        assert ours.dtype == j_dtype
        np.testing.assert_array_equal(np.asarray(ours.astype(jnp.float32)), theirs)
    with pytest.raises(NotImplementedError, match="not implemented for 'BFloat16'"):
        F.interpolate(jnp.zeros((1, 1, 4, 4), jnp.bfloat16), size=2, mode="bilinear", antialias=True)


def test_jit_and_deprecated_aliases():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 3, 4)), jnp.float32)
    eager = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    jitted = jax.jit(lambda v: F.interpolate(v, scale_factor=2, mode="bilinear", align_corners=True))(x)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))
    with pytest.warns(UserWarning, match="upsample_bilinear` is deprecated"):
        np.testing.assert_array_equal(np.asarray(F.upsample_bilinear(x, scale_factor=2)), np.asarray(eager))
    with pytest.warns(UserWarning, match="upsample_nearest` is deprecated"):
        assert F.upsample_nearest(x, size=(5, 6)).shape == (1, 2, 5, 6)
    with pytest.warns(UserWarning, match="upsample` is deprecated"):
        assert F.upsample(x, size=5, mode="bicubic").shape == (1, 2, 5, 5)


_BAD = [
    (dict(size=2, scale_factor=2), (4, 4)),
    (dict(), (4, 4)),
    (dict(size=2, align_corners=True), (4, 4)),
    (dict(size=2, mode="area", align_corners=False), (4, 4)),
    (dict(size=(2, 2, 2)), (4, 4)),
    (dict(size=(2.0, 2)), (4, 4)),
    (dict(scale_factor=(2, 2, 2)), (4, 4)),
    (dict(size=2, recompute_scale_factor=True), (4, 4)),
    (dict(size=2, antialias=True), (4, 4)),
    (dict(size=2, mode="linear", antialias=True), (4,)),
    (dict(size=2, mode="bilinear"), (4,)),
    (dict(size=2, mode="linear"), (4, 4)),
    (dict(size=2, mode="trilinear"), (4, 4)),
    (dict(size=2, mode="bicubic"), (4,)),
    (dict(size=2, mode="bicubic"), (2, 2, 2)),
    (dict(size=2, mode="foo"), (4, 4)),
    (dict(size=0), (4, 4)),
    (dict(size=0, mode="linear"), (4,)),
    (dict(scale_factor=0.1, mode="trilinear"), (2, 2, 2)),
    (dict(size=-1), (4, 4)),
    (dict(size=2, mode="lanczos"), (4, 4)),
    (dict(size=2, mode="lanczos", align_corners=True, antialias=True), (4, 4)),
]


@pytest.mark.parametrize(("kw", "spatial"), _BAD)
def test_errors_are_torchs(kw, spatial):
    x = np.zeros((1, 2, *spatial), np.float32)
    with pytest.raises(Exception) as theirs:
        torch.nn.functional.interpolate(torch.tensor(x), **kw)
    with pytest.raises(type(theirs.value)) as ours:
        F.interpolate(jnp.asarray(x), **kw)
    assert str(ours.value) == str(theirs.value)


def test_empty_inputs_and_refusals():
    with pytest.raises(RuntimeError, match=r"Input and output sizes should be greater than 0, but got input "
                                           r"\(H: 0, W: 4\) output \(H: 2, W: 2\)"):
        F.interpolate(jnp.zeros((1, 2, 0, 4)), size=2)
    with pytest.raises(RuntimeError, match=r"Non-empty 4D data tensor expected but got a tensor with sizes "
                                           r"\[1, 0, 4, 4\]"):
        F.interpolate(jnp.zeros((1, 0, 4, 4)), size=2)
    assert F.interpolate(jnp.zeros((0, 2, 3, 3)), size=2, mode="bilinear").shape == (0, 2, 2, 2)
    with pytest.raises(NotImplementedError, match="lanczos"):
        F.interpolate(jnp.zeros((1, 1, 4, 4)), size=2, mode="lanczos", antialias=True)
    with pytest.raises(NotImplementedError, match="floating input only"):
        F.interpolate(jnp.zeros((1, 1, 4, 4), jnp.int32), size=2)
