"""jax_impl's oneDNN convolution route (jax_impl/nn/_conv_onednn.py) against torch's CPU conv2d.

torch's float32 CPU ``conv2d`` runs oneDNN too (a newer release than the
``onednn-cpu-gomp`` wheel's), so on a seeded grid of shapes, strides,
paddings and dilations most results are bit for bit torch's: measured, the
forward on 19 of the 20 cases, the input gradient on 18, the weight
gradient (summed over the batch in one chunk per core here, by one OpenMP
team in torch) on 9. The rest differ where the two releases pick other
kernels: at most 1.4e-7 (forward), 4.4e-7 (input gradient) and 1.2e-6
(weight gradient) of the largest magnitude, so the bound is 1e-5 (~8x);
the hand-picked shapes of the MNIST example, LeNet and a ResNet stem are
compared exactly (forward and input gradient).

Derivatives beyond reverse mode (``jax.jvp``, second order, ``vmap``) are
compared with XLA's convolution, as jax_impl's other routes are.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from jax import lax

from jax_impl.backends import mkldnn
from jax_impl.nn import _fast_conv as FC
from jax_impl.nn import functional as F
from tests._cpu import AVX512

pytestmark = pytest.mark.skipif(not mkldnn.is_available(), reason="oneDNN (onednn-cpu-gomp) is not installed")


def _onednn():
    from jax_impl.nn import _conv_onednn

    return _conv_onednn


def _cases(count: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        kh, kw = (int(k) for k in rng.integers(1, 6, 2))
        sh, sw = (int(s) for s in rng.integers(1, 4, 2))
        dh, dw = (int(d) for d in rng.integers(1, 3, 2))
        pads = tuple((int(a), int(a)) for a in rng.integers(0, 3, 2))  # torch pads symmetrically
        h = int(rng.integers(dh * (kh - 1) + 1, 20))
        w = int(rng.integers(dw * (kw - 1) + 1, 20))
        out.append((int(rng.integers(1, 9)), int(rng.integers(1, 20)), int(rng.integers(1, 33)), (h, w), (kh, kw),
                    (sh, sw), pads, (dh, dw)))
    return out


# (N, C_in, C_out, (H, W), (kH, kW), stride, ((top, bottom), (left, right)), dilation)
_SHAPES = [
    (64, 32, 64, (26, 26), (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1)),  # the MNIST example's conv2
    (64, 1, 32, (28, 28), (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1)),   # ... and conv1 (one input channel)
    (16, 3, 6, (32, 32), (5, 5), (1, 1), ((0, 0), (0, 0)), (1, 1)),    # LeNet
    (4, 3, 16, (40, 40), (7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1)),    # a ResNet stem
    (3, 8, 8, (9, 9), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),       # batch not a multiple of the cores
    (1, 4, 5, (10, 9), (3, 2), (2, 1), ((1, 1), (0, 0)), (1, 2)),       # one sample: one chunk
    *_cases(14, 0),
]


# The shapes where torch's oneDNN (a newer release) picks the same kernels: forward and input gradient
# bit for bit.
_EXACT = _SHAPES[:4]


def _torch(x, w, stride, pads, dilation):
    return TF.conv2d(x, w, stride=stride, padding=(pads[0][0], pads[1][0]), dilation=dilation)


def _ours_and_torch(case):
    """``(y, dx, dw)`` by the oneDNN route (the gradients under jit) and by torch, on seeded values."""
    n, c_in, c_out, size, kernel, stride, pads, dilation = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = rng.standard_normal((n, c_in, *size), dtype=np.float32)
    w = rng.standard_normal((c_out, c_in, *kernel), dtype=np.float32)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = _torch(tx, tw, stride, pads, dilation)
    g = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
    ty.backward(torch.from_numpy(g))
    y, vjp = jax.vjp(lambda a, b: _onednn().conv2d(a, b, stride, pads, dilation), jnp.asarray(x), jnp.asarray(w))
    dx, dw = jax.jit(vjp)(jnp.asarray(g))
    return (y, dx, dw), (ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy())


@pytest.mark.parametrize("case", _SHAPES, ids=[f"case{i}" for i in range(len(_SHAPES))])
def test_matches_torch_forward_and_gradients(case):
    ours, refs = _ours_and_torch(case)
    if case in _EXACT:
        for a, b in zip(ours[:2], refs[:2]):
            np.testing.assert_array_equal(np.asarray(a), b)
    for a, b in zip(ours, refs):
        assert np.abs(np.asarray(a) - b).max() <= 1e-5 * max(np.abs(b).max(), 1e-30)


# ResNet-18's stage-3 and stage-4 convs (few output pixels per channel), which only the channels-last eval
# path sends to oneDNN.
_RESNET_STAGES = [
    (4, 256, 256, (14, 14), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (4, 128, 256, (28, 28), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),
    (32, 256, 256, (4, 4), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (1, 512, 512, (7, 7), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
]


@pytest.mark.parametrize("case", _SHAPES + _RESNET_STAGES, ids=[f"case{i}" for i in range(len(_SHAPES))]
                         + [f"stage{i}" for i in range(len(_RESNET_STAGES))])
def test_channels_last_forward_matches_torch(case):
    """The channels-last forward (NHWC input and result, in place) against torch's conv2d on the same
    values, NCHW and channels-last. oneDNN picks its ``nxc`` kernels there (``brgconv`` on AVX-512), as
    torch does for ``torch.channels_last`` tensors, and these sum in another order than the blocked
    kernels of torch's NCHW conv. Measured: bit for bit torch's channels-last conv on 22 of the 24 cases
    (at most 2.0e-7 of the largest magnitude on the others), and at most 2.5e-6 from torch's NCHW conv,
    which is torch's own distance between its two layouts on those cases (the ResNet stages', with 2304 to
    4608 terms per sum); bound 1e-5, the route's. The ResNet stages are compared exactly with torch's
    channels-last conv."""
    n, c_in, c_out, size, kernel, stride, pads, dilation = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = rng.standard_normal((n, c_in, *size), dtype=np.float32)
    w = rng.standard_normal((c_out, c_in, *kernel), dtype=np.float32)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    want = _torch(tx, tw, stride, pads, dilation).numpy()
    cl = torch.channels_last
    want_cl = _torch(tx.to(memory_format=cl), tw.to(memory_format=cl), stride, pads, dilation).contiguous().numpy()
    z = jnp.asarray(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    got = jax.jit(lambda a, b: _onednn().conv2d_nhwc(a, b, stride, pads, dilation))(z, jnp.asarray(w))
    got = np.asarray(got).transpose(0, 3, 1, 2)
    assert got.shape == want.shape
    if case in _RESNET_STAGES and AVX512:  # other oneDNN kernels on AVX2 (tests/_cpu.py)
        np.testing.assert_array_equal(got, want_cl)
    for ref in (want, want_cl):
        assert np.abs(got - ref).max() <= 1e-5 * max(np.abs(want).max(), 1e-30)


def test_asymmetric_padding_matches_torch_on_the_padded_input():
    """'same' padding with an even kernel pads one side more; torch convolves a zero-padded copy
    (another oneDNN geometry, so other sums): measured 4e-7 relative, bound 1e-5."""
    stride, pads, dilation = (2, 1), ((1, 2), (0, 1)), (1, 2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4, 12, 11), dtype=np.float32)
    w = rng.standard_normal((6, 4, 3, 2), dtype=np.float32)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = TF.conv2d(TF.pad(tx, (0, 1, 1, 2)), tw, stride=stride, dilation=dilation)
    g = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
    ty.backward(torch.from_numpy(g))
    y, vjp = jax.vjp(lambda a, b: _onednn().conv2d(a, b, stride, pads, dilation), jnp.asarray(x), jnp.asarray(w))
    for ours, ref in zip((y, *vjp(jnp.asarray(g))), (ty.detach(), tx.grad, tw.grad)):
        ref = ref.numpy()
        assert np.abs(np.asarray(ours) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_functional_conv2d_takes_the_route():
    """``jax_impl.nn.functional.conv2d`` (bias, 'same' padding) runs oneDNN for a large float32 conv and
    equals torch's ``F.conv2d`` exactly; float64 and ``mkldnn.flags(enabled=False)`` keep XLA's conv."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16, 24, 24), dtype=np.float32)
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    b = rng.standard_normal(32, dtype=np.float32)
    geometry = FC.ConvGeometry.of(x.shape, w.shape, (1, 1), ((1, 1), (1, 1)), (1, 1))
    assert FC.route_for(geometry).name == "onednn"
    fn = jax.jit(lambda a, k, c: F.conv2d(a, k, c, padding="same"))
    assert "jax_impl_onednn_conv2d" in fn.lower(x, w, b).as_text()
    expected = TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding="same").numpy()
    if AVX512:
        np.testing.assert_array_equal(np.asarray(fn(x, w, b)), expected)
    else:  # torch's jit:avx2 kernel adds the bias in its accumulator (tests/_cpu.py): the route's bound
        assert np.abs(np.asarray(fn(x, w, b)) - expected).max() <= 1e-5 * np.abs(expected).max()
    with mkldnn.flags(enabled=False):
        assert "onednn" not in jax.jit(lambda a, k: F.conv2d(a, k)).lower(x, w).as_text()
    assert FC.route_for(geometry._replace(dtype="float64")).name != "onednn"


def _xla_conv(stride, pads, dilation):
    return lambda a, b: lax.conv_general_dilated(a, b, stride, pads, rhs_dilation=dilation,
                                                 dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                                 precision=lax.Precision.HIGHEST)


def test_forward_mode_second_order_and_vmap_match_xla():
    """jvp, a gradient of a gradient and vmap (shared and batched weights) through the three primitives.

    Against XLA's conv: the forward and jvp are oneDNN's sums vs Eigen's (measured 5e-7 relative), the
    second-order and batched-weight gradients chain several convs (measured 2e-6).
    """
    stride, pads, dilation = (2, 1), ((1, 2), (0, 1)), (1, 2)
    conv = lambda a, b: _onednn().conv2d(a, b, stride, pads, dilation)  # noqa: E731
    ref = _xla_conv(stride, pads, dilation)
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((4, 3, 11, 9), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((5, 3, 3, 2), dtype=np.float32))
    tx, tw = (jnp.asarray(rng.standard_normal(a.shape, dtype=np.float32)) for a in (x, w))

    def close(a, b, tol):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= tol * np.abs(b).max(), np.abs(a - b).max() / np.abs(b).max()

    close(jax.jvp(conv, (x, w), (tx, tw))[1], jax.jvp(ref, (x, w), (tx, tw))[1], 1e-5)

    def second(f):
        return jax.grad(lambda k: jnp.sum(jax.grad(lambda a: jnp.sum(f(a, k) ** 2))(x) ** 2))(w)

    close(second(conv), second(ref), 1e-5)
    xs = jnp.asarray(rng.standard_normal((3, *x.shape), dtype=np.float32))
    ws = jnp.asarray(rng.standard_normal((3, *w.shape), dtype=np.float32))
    close(jax.vmap(lambda a: conv(a, w))(xs), jax.vmap(lambda a: ref(a, w))(xs), 1e-5)
    close(jax.vmap(conv)(xs, ws), jax.vmap(ref)(xs, ws), 1e-5)
    loss = lambda f: jax.vmap(jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1)))  # noqa: E731
    for a, b in zip(loss(conv)(xs, ws), loss(ref)(xs, ws)):
        close(a, b, 1e-5)


def test_concurrent_callers_of_one_geometry_get_their_own_results():
    """Two devices of one process (a data-parallel step) call the same geometry at once: each caller's
    weight gradient is its own batch's, as computed alone (the chunks' partial sums are per geometry, so
    they are added up before another caller may overwrite them)."""
    import concurrent.futures

    from jax_impl import _onednn as library

    conv = library.convolution((8, 16, 12, 12), (24, 16, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1))
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((8, 16, 12, 12), dtype=np.float32) for _ in range(6)]
    gs = [rng.standard_normal((8, 24, 10, 10), dtype=np.float32) for _ in range(6)]

    def weight_grad(i):
        out = np.empty((24, 16, 3, 3), np.float32)
        for _ in range(20):
            conv.weight_grad(xs[i].ctypes.data, gs[i].ctypes.data, out.ctypes.data)
            yield out.copy()

    alone = [next(weight_grad(i)) for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda i: list(weight_grad(i)), range(6)))
    for i, results in enumerate(together):
        for result in results:
            np.testing.assert_array_equal(result, alone[i])


def test_torch_keeps_its_openmp_threads():
    """oneDNN runs single-threaded on jax_impl's own workers: the process's OpenMP runtime (torch's)
    gains no thread, so libgomp does not throttle torch's spin-waits (which slows torch's steps). The
    threads counted are those the convs add once JAX's own and the route's registration (which starts
    the native lanes) exist: the Python path's lanes, one per core."""
    jnp.ones(1).block_until_ready()
    _onednn().registered()
    before = len(os.listdir("/proc/self/task"))
    conv = jax.jit(lambda a, b: _onednn().conv2d(a, b, (1, 1), ((0, 0), (0, 0)), (1, 1)))
    x, w = jnp.ones((32, 8, 20, 20), jnp.float32), jnp.ones((16, 8, 3, 3), jnp.float32)
    jax.block_until_ready(jax.grad(lambda a, b: jnp.sum(conv(a, b)), argnums=(0, 1))(x, w))
    from jax_impl import _onednn as library

    assert len(os.listdir("/proc/self/task")) - before <= library.workers()


def test_environment_variable_turns_it_off():
    """``JAX_IMPL_MKLDNN=0``: oneDNN is not loaded and every conv is XLA's."""
    import subprocess
    import sys

    code = ("from jax_impl.backends import mkldnn; import jax, jax.numpy as jnp; from jax_impl.nn import functional as F;"
            "x = jnp.ones((8, 16, 24, 24)); w = jnp.ones((32, 16, 3, 3));"
            "print(mkldnn.is_available(), 'onednn' in jax.jit(F.conv2d).lower(x, w).as_text())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "JAX_IMPL_MKLDNN": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_channels_last_eval_conv_takes_the_nhwc_kernel_from_2_to_the_22_macs():
    from jax_impl.nn import _channels_last as cl

    big = jnp.zeros((4, 16, 16, 64), jnp.float32), jnp.zeros((64, 64, 3, 3), jnp.float32)  # 3.8e7 MACs
    small = jnp.zeros((1, 8, 8, 4), jnp.float32), jnp.zeros((4, 4, 3, 3), jnp.float32)  # below 2**22
    # ResNet's last stage at batch 32 of 64x64: few pixels per channel, which the NCHW model leaves to the
    # GEMM forward.
    few_pixels = jnp.zeros((32, 2, 2, 512), jnp.float32), jnp.zeros((512, 512, 3, 3), jnp.float32)
    assert not FC.takes_onednn(FC.ConvGeometry.of((32, 512, 2, 2), (512, 512, 3, 3), (1, 1), ((1, 1),) * 2, (1, 1)))
    for (z, w), target in ((big, True), (small, False), (few_pixels, True)):
        text = jax.jit(lambda a, b: cl._conv_nhwc(a, b, (1, 1), ((1, 1), (1, 1)), (1, 1))).lower(z, w).as_text()
        assert ("jax_impl_onednn_conv2d_nhwc" in text) is target
        assert ("convolution" in text) is not target
    # vmap folds a batch of NHWC inputs into the kernel's batch: per sample the same sums (bit for bit
    # here; oneDNN may pick another kernel for another batch size, so the bound is the route's 1e-5).
    rng = np.random.default_rng(0)
    zs = jnp.asarray(rng.standard_normal((3, *big[0].shape), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal(big[1].shape, dtype=np.float32))
    conv = jax.jit(lambda a, b: cl._conv_nhwc(a, b, (1, 1), ((1, 1), (1, 1)), (1, 1)))
    batched = np.asarray(jax.vmap(conv, in_axes=(0, None))(zs, w))
    one_by_one = np.stack([np.asarray(conv(z, w)) for z in zs])
    assert np.abs(batched - one_by_one).max() <= 1e-5 * np.abs(one_by_one).max()


# Batches with few output pixels per output channel, which oneDNN cuts by channels: ResNet-18's stage-3
# and stage-4 convs at 224x224 (batch 4 and 1), a stride-2 one, and convs whose output channels do not cut
# into runs of 16 per core (cut by samples, but for the input gradient, cut by input channels where they
# cut: the last is the conv whose input gradient is the DCGAN generator's first layer).
_FEW_PIXELS = [
    (4, 256, 256, (14, 14), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (4, 512, 512, (7, 7), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (4, 256, 512, (14, 14), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),
    (1, 128, 256, (28, 28), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1)),
    (2, 96, 200, (9, 9), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (2, 40, 200, (9, 9), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    (32, 256, 100, (4, 4), (4, 4), (1, 1), ((0, 0), (0, 0)), (1, 1)),
]


@pytest.mark.parametrize("case", _FEW_PIXELS, ids=[f"few{i}" for i in range(len(_FEW_PIXELS))])
def test_few_pixels_per_channel_are_cut_by_channels_and_match_torch(case):
    """Cut by channels, each core computes whole sums over the batch for its channels, as torch's one
    OpenMP team does: forward, input gradient and weight gradient are torch's bit for bit on ResNet's
    stage shapes (measured; the weight gradient cut by samples is not, its partial sums are added per
    chunk). A conv whose output channels do not cut into runs of 16 per core stays cut by samples (bound
    1e-5, the route's), but for its input gradient where its input channels cut: whole sums over the
    output channels, torch's bit for bit too (measured on these shapes)."""
    from jax_impl import _onednn as library

    n, c_in, c_out, size, kernel, stride, pads, dilation = case
    conv = library.convolution((n, c_in, *size), (c_out, c_in, *kernel), stride, pads, dilation)
    block = 16 * library.workers()
    inputs_cut = library.workers() > 1 and c_in % block == 0
    cuts = inputs_cut and c_out % block == 0
    assert conv.split == ("channels" if cuts else "batch")
    assert conv.input_split == ("channels" if inputs_cut else "batch")
    for step, a, b in zip(("forward", "input_grad", "weight_grad"), *_ours_and_torch(case)):
        if cuts or (step == "input_grad" and inputs_cut):
            np.testing.assert_array_equal(np.asarray(a), b)
        assert np.abs(np.asarray(a) - b).max() <= 1e-5 * np.abs(b).max()


def test_lanes_are_kept_one_per_core_unless_turned_off():
    """Part i of every call runs on lane i, kept on the i-th core this process may use;
    ``JAX_IMPL_ONEDNN_PIN=0`` lets the lanes float over all of them."""
    import json
    import subprocess
    import sys

    code = ("import json, os; from jax_impl import _onednn as o;"
            "print(json.dumps([[sorted(l.submit(os.sched_getaffinity, 0).result()) for l in o._lanes()],"
            " sorted(os.sched_getaffinity(0))]))")
    for pin in ("1", "0"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "JAX_IMPL_ONEDNN_PIN": pin})
        assert out.returncode == 0, out.stderr
        lanes, cpus = json.loads(out.stdout)
        assert len(lanes) == len(cpus)
        assert lanes == ([[c] for c in cpus] if pin == "1" else [cpus] * len(cpus))


def test_the_caller_runs_one_part_and_keeps_its_openmp_threads(monkeypatch):
    """A call hands every part but one to the lanes; the calling thread runs the part of the core it is
    on, single-threaded, and its OpenMP thread count (torch's, on a user's main thread) is put back. The
    result is the same as with every part on a lane (the parts are the same oneDNN calls)."""
    from jax_impl import _onednn as library

    conv = library.convolution((4, 64, 12, 12), (64, 64, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    x = np.random.default_rng(0).standard_normal(conv.x_shape, dtype=np.float32)
    w = np.random.default_rng(1).standard_normal(conv.w_shape, dtype=np.float32)
    mine, handed = np.empty(conv.y_shape, np.float32), np.empty(conv.y_shape, np.float32)
    submitted = []
    real_on_lane = library._on_lane
    monkeypatch.setattr(library, "_on_lane", lambda i, *call: submitted.append(i) or real_on_lane(i, *call))
    threads = torch.get_num_threads()
    conv.forward(x.ctypes.data, w.ctypes.data, mine.ctypes.data)
    assert library.library().omp_get_max_threads() == threads == torch.get_num_threads()
    parts = min(library.workers(), 4)
    assert len(submitted) == parts - 1
    monkeypatch.setattr(library, "_own_part", lambda parts: -1)  # no part is the caller's: all on lanes
    monkeypatch.setattr(library, "_run_here", lambda fn, *args: None)
    conv.forward(x.ctypes.data, w.ctypes.data, handed.ctypes.data)
    np.testing.assert_array_equal(mine, handed)


def test_a_failing_part_fails_the_call_after_every_part_has_run():
    """An error in a lane's part is raised in the caller, once the other parts (the caller's own included)
    have finished: none still writes into XLA's buffers after the call has returned."""
    import time

    from jax_impl import _onednn as library

    conv = library.convolution((4, 64, 12, 12), (64, 64, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    finished = []

    def slow(i):
        time.sleep(0.05)
        finished.append(i)

    def fail(i):
        raise ValueError(f"part {i}")

    parts = max(2, library.workers())
    own = library._own_part(parts)
    calls = [(slow, i) if i == own else (fail, i) for i in range(parts)]
    with pytest.raises(ValueError, match="part"):
        conv._parallel(calls)
    assert finished == [own]


def _transpose_cases(count: int, seed: int):
    """Seeded transposed-conv shapes big enough for the route (``2**22`` multiply-adds)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        k, s, d = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
        p, op = int(rng.integers(0, 3)), int(rng.integers(0, s))
        if op >= s and op >= d:
            continue
        h = int(rng.integers(2, 14))
        c_in, c_out = int(rng.integers(8, 65)), int(rng.integers(1, 33))
        n = max(1, -(-(1 << 22) // (h * h * c_in * c_out * k * k)))
        if (h - 1) * s - 2 * p + d * (k - 1) + 1 + op >= 1 and n <= 256:
            out.append((n, c_in, c_out, h, k, s, p, op, d))
    return out


# (N, C_in, C_out, H = W, k, stride, padding, output_padding, dilation)
_TRANSPOSE = [
    (32, 100, 256, 1, 4, 1, 0, 0, 1),   # the DCGAN example's generator at 32x32: the latent's 4x4 ...
    (32, 256, 128, 4, 4, 2, 1, 0, 1),   # ... the doubling blocks ...
    (32, 128, 64, 8, 4, 2, 1, 0, 1),
    (32, 64, 3, 16, 4, 2, 1, 0, 1),     # ... and the RGB output
    (256, 32, 16, 9, 3, 2, 0, 1, 1),    # output_padding above padding: a negative high pad for oneDNN
    # The seeded grid: the slow tier pays for it.
    *(pytest.param(c, marks=pytest.mark.slow) for c in _transpose_cases(10, 4)),
]


@pytest.mark.parametrize("case", _TRANSPOSE, ids=[f"t{i}" for i in range(len(_TRANSPOSE))])
def test_conv_transpose2d_runs_backward_data_and_matches_torch(case):
    """``F.conv_transpose2d`` in float32 runs oneDNN's backward-data kernel (torch's CPU deconvolution),
    its gradients oneDNN's forward conv and weight gradient, under jit. Measured on these 15 cases: the
    input gradient bit for bit torch's on all, the output on 13 (at most 5.4e-7 of the largest magnitude
    on the others, where the two oneDNN releases pick other kernels), the weight gradient (summed in a
    chunk per core here, by one OpenMP team in torch) on 5 (at most 1.8e-6). Bound 1e-5, the route's;
    the DCGAN shapes' output and input gradient exactly."""
    n, c_in, c_out, h, k, s, p, op, d = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = rng.standard_normal((n, c_in, h, h), dtype=np.float32)
    w = rng.standard_normal((c_in, c_out, k, k), dtype=np.float32)
    b = rng.standard_normal(c_out, dtype=np.float32)
    g = FC.transpose_geometry(x.shape, w.shape, (s, s), (p, p), (op, op), (d, d))
    assert FC.takes_onednn_transpose(g)
    fn = jax.jit(lambda a, kk, c: F.conv_transpose2d(a, kk, c, s, p, op, 1, d))
    assert "jax_impl_onednn_conv2d_input_grad" in fn.lower(x, w, b).as_text()
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = TF.conv_transpose2d(tx, tw, torch.from_numpy(b), s, p, op, 1, d)
    ct = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
    ty.backward(torch.from_numpy(ct))
    y, vjp = jax.vjp(fn, jnp.asarray(x), jnp.asarray(w), jnp.asarray(b))
    dx, dw, _ = jax.jit(vjp)(jnp.asarray(ct))
    exact = case in _TRANSPOSE[:4]
    for i, (ours, ref) in enumerate(zip((y, dx, dw), (ty.detach(), tx.grad, tw.grad))):
        ours, ref = np.asarray(ours), ref.numpy()
        assert ours.shape == ref.shape
        if exact and i < 2:
            np.testing.assert_array_equal(ours, ref)
        assert np.abs(ours - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1e-30)


def test_conv_transpose2d_higher_order_and_vmap_match_xla():
    """jvp, a gradient of a gradient and vmap through the transposed conv's oneDNN route, against XLA's
    transposed conv (``mkldnn`` disabled: the stride-dilated convolution). Measured at most 1.2e-6 (the
    second-order gradient, four convs chained), bound 1e-5."""
    s, p, op, d = 2, 1, 1, 1
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((64, 16, 8, 8), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((16, 8, 3, 3), dtype=np.float32))
    tx, tw = (jnp.asarray(rng.standard_normal(a.shape, dtype=np.float32)) for a in (x, w))
    conv = lambda a, b: F.conv_transpose2d(a, b, None, s, p, op, 1, d)  # noqa: E731

    def results():  # a new function each call: jit's cache does not see mkldnn's flag
        def run():
            jvp = jax.jvp(conv, (x, w), (tx, tw))[1]
            second = jax.grad(lambda k: jnp.sum(jax.grad(lambda a: jnp.sum(conv(a, k) ** 2))(x) ** 2))(w)
            batched = jax.vmap(lambda a: conv(a, w))(jnp.stack([x[:32], x[32:]]))
            return jvp, second, batched

        return jax.jit(run)

    assert "onednn" in results().lower().as_text()
    ours = results()()
    with mkldnn.flags(enabled=False):
        assert "onednn" not in results().lower().as_text()
        refs = results()()
    for a, b in zip(ours, refs):
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), np.abs(a - b).max() / np.abs(b).max()
