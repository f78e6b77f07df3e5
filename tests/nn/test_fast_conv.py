"""jax_impl.nn._fast_conv against torch.nn.functional: forward and all gradients.

Seeded random grids over shape, stride, padding (int, tuple, 'same', 'valid'),
dilation, groups and bias, plus the benchmark shapes scaled down. The
cotangent is random, so every gradient entry is checked.

Tolerances: float32 results are compared with the error measured relative to
the largest magnitude of the torch result (``max|ours - torch| / max|torch|``)
at <= 1e-5. Both sides sum up to C*kH*kW (forward), N*Ho*Wo (weight grad) or
C_out*kH*kW (input grad) float32 products in different orders; the largest
error measured over these grids was ~1e-6 (weight gradients with N*Ho*Wo in
the thousands): measured maxima over these grids were 4e-7 (output), 8e-7
(input grad) and 1.7e-6 (weight grad), so 1e-5 leaves a ~6x margin. float64
runs in a ``jax.enable_x64`` context against torch float64 at <= 1e-12
(measured max 2.3e-15).
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from jax_impl.nn import _fast_conv as FC
from jax_impl.nn import functional as F

# (nd, N, C_in, C_out, spatial, kernel, stride, padding, dilation, groups, bias)
_CASES = [
    (2, 20, 3, 6, (12, 12), (5, 5), 1, 0, 1, 1, True),     # LeNet-like, YNN-sized batch
    (2, 17, 6, 16, (9, 9), (5, 5), 1, 0, 1, 1, False),
    (2, 4, 3, 20, (16, 16), (7, 7), 2, 3, 1, 1, False),    # ResNet stem
    (2, 18, 8, 8, (8, 8), (3, 3), 1, 1, 1, 1, True),
    (2, 18, 8, 24, (8, 8), (3, 3), 2, 1, 1, 1, False),     # strided, hi padding cropped
    (2, 18, 8, 12, (8, 8), (1, 1), 2, 0, 1, 1, False),     # 1x1 downsample
    (2, 18, 4, 6, (11, 10), (3, 2), (2, 3), (1, 2), (2, 1), 1, True),
    (2, 20, 4, 5, (9, 9), (3, 3), 1, "same", 2, 1, True),
    (2, 20, 4, 5, (9, 8), (4, 2), 1, "same", 1, 1, False),   # even kernel: odd pad on the high side
    (2, 20, 4, 5, (9, 9), (3, 3), 3, "valid", 1, 1, False),
    (2, 18, 6, 9, (8, 8), (3, 3), 1, 1, 1, 3, True),       # groups: plain path
    (2, 3, 2, 4, (6, 6), (3, 3), 1, 1, 1, 1, True),        # small: jax's own rule
    (2, 0, 2, 4, (6, 6), (3, 3), 1, 1, 1, 1, False),       # unbatched (N=0 means no batch axis)
    (1, 20, 3, 5, (17,), (4,), 2, 1, 1, 1, True),
    (3, 18, 2, 3, (5, 6, 5), (3, 2, 3), 1, 1, 1, 1, True),
]


def _random_cases(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        d = tuple(int(v) for v in rng.integers(1, 3, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        sp = tuple(d[i] * (k[i] - 1) + 1 + int(rng.integers(0, 9)) for i in range(2))
        g = int(rng.choice([1, 1, 1, 2]))
        cin = g * int(rng.integers(1, 5))
        cout = g * int(rng.integers(1, 12))
        n = int(rng.choice([2, 17, 24]))
        out.append((2, n, cin, cout, sp, k, s, p, d, g, bool(rng.integers(0, 2))))
    return out


_ALL = _CASES + _random_cases(14, seed=1)


def _run(case, dtype):
    nd, n, cin, cout, sp, k, s, p, d, g, has_bias = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    x = rng.standard_normal(((n,) if n else ()) + (cin,) + sp).astype(dtype)
    w = (rng.standard_normal((cout, cin // g) + k) / np.sqrt(cin * np.prod(k))).astype(dtype)
    b = rng.standard_normal(cout).astype(dtype) if has_bias else None

    tfn = {1: TF.conv1d, 2: TF.conv2d, 3: TF.conv3d}[nd]
    t_args = [torch.tensor(a, requires_grad=True) for a in (x, w) + ((b,) if has_bias else ())]
    t_out = tfn(t_args[0], t_args[1], t_args[2] if has_bias else None, stride=s, padding=p, dilation=d, groups=g)
    ct = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    t_grads = torch.autograd.grad(t_out, t_args, torch.tensor(ct))

    jfn = {1: FC.conv1d, 2: FC.conv2d, 3: FC.conv3d}[nd]

    def f(*a):
        return jfn(a[0], a[1], a[2] if has_bias else None, stride=s, padding=p, dilation=d, groups=g)

    arrays = [jnp.asarray(a) for a in (x, w) + ((b,) if has_bias else ())]
    y, vjp = jax.vjp(jax.jit(f), *arrays)
    grads = vjp(jnp.asarray(ct))
    assert y.dtype == dtype and all(gr.dtype == dtype for gr in grads)
    errs = []
    for ours, ref in zip((y,) + tuple(grads), (t_out,) + tuple(t_grads)):
        ref = ref.detach().numpy()
        assert ours.shape == ref.shape
        scale = max(np.abs(ref).max(), 1e-30) if ref.size else 1.0
        errs.append(float(np.abs(np.asarray(ours) - ref).max() / scale) if ref.size else 0.0)
    return errs


@pytest.mark.parametrize("case", _ALL, ids=[str(i) for i in range(len(_ALL))])
def test_float32_matches_torch(case):
    errs = _run(case, np.float32)
    assert max(errs) <= 1e-5, errs


@pytest.mark.parametrize("case", _CASES[:8] + _CASES[10:11], ids=[str(i) for i in range(9)])
def test_float64_matches_torch(case):
    with jax.enable_x64(True):
        errs = _run(case, np.float64)
    assert max(errs) <= 1e-12, errs


def test_same_values_as_functional():
    """Outside the direct path the forward is the very same lax op as jax_impl.nn.functional.conv2d."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((20, 6, 12, 12), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((16, 6, 5, 5), dtype=np.float32))
    assert not FC._use_direct(w)
    np.testing.assert_array_equal(np.asarray(FC.conv2d(x, w, padding=2)), np.asarray(F.conv2d(x, w, padding=2)))


def test_errors_match_functional():
    x = jnp.zeros((2, 4, 8, 8))
    with pytest.raises(ValueError, match="strided"):
        FC.conv2d(x, jnp.zeros((3, 4, 3, 3)), stride=2, padding="same")
    with pytest.raises(ValueError, match="Invalid padding string"):
        FC.conv2d(x, jnp.zeros((3, 4, 3, 3)), padding="full")
    with pytest.raises(ValueError, match="channels"):
        FC.conv2d(x, jnp.zeros((3, 3, 3, 3)))


def test_weight_grad_leaves_ynn():
    """The compiled weight gradient of a LeNet-sized conv has no YNNPACK fusion (jax's own rule has one)."""
    x = jnp.zeros((32, 3, 16, 16))
    w = jnp.zeros((6, 3, 5, 5))
    g = jnp.zeros((32, 6, 12, 12))

    def hlo(fn):
        return jax.jit(lambda w, g: jax.vjp(lambda v: fn(x, v), w)[1](g)).lower(w, g).compile().as_text()

    assert "__ynn_fusion" not in hlo(FC.conv2d)
    if "__ynn_fusion" not in hlo(F.conv2d):
        pytest.skip("this XLA no longer sends the plain weight-gradient conv to YNNPACK")


def test_flag_parsing():
    f = FC._ynn_takes_convs
    key = "--xla_cpu_experimental_ynn_fusion_type="
    assert f("") and f("--xla_cpu_use_thunk_runtime=true")
    assert not f(key) and not f(key + "-individual_convolution") and not f(key + "individual_dot")
    assert f(key + "-individual_dot") and f(key + "individual_convolution,dot") and f(f"{key} {key}individual_convolution")
