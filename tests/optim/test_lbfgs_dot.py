"""``jax_impl.optim.lbfgs_dot.torch_dot`` against ``torch.dot`` on CPU (MKL's ``ddot`` / ``sdot``), bit for bit:
seeded grids of lengths (every tail of the 4-register blocks, the thread split sizes) and of values
(Gaussian, exponents spread over 2**+-40, near-total cancellation), float64 and float32."""

from __future__ import annotations

import os
import subprocess
import sys
import pathlib

import numpy as np
import pytest
import torch

from jax_impl.optim.lbfgs_dot import mkl_dot_isa, torch_dot

needs_mkl = pytest.mark.skipif(mkl_dot_isa() is None or not torch.backends.mkl.is_available(),
                               reason="torch's dot here is not one of the MKL kernels reproduced")

# The lengths around every branch: each tail of the 32 (float64) / 64 (float32) element blocks of AVX-512,
# the one-block and two-block lengths, and both sides of the threading thresholds (4095 / 8191).
_SHORT = list(range(1, 140))
_LONG = [255, 256, 257, 1000, 1023, 4095, 4096, 4097, 8191, 8192, 8193, 12345]


def _vectors(rng: np.random.Generator, kind: str, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    if kind == "wide":
        x = x * 2.0 ** rng.integers(-40, 40, n)
        y = y * 2.0 ** rng.integers(-40, 40, n)
    elif kind == "cancelling":  # the second half nearly cancels the first: the sum is all rounding
        half = (n + 1) // 2
        x = np.concatenate([x[:half], x[:half]])[:n] * (1 + 1e-7 * rng.standard_normal(n))
        y = np.concatenate([y[:half], -y[:half]])[:n]
    return x.astype(dtype), y.astype(dtype)


def _torch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).dot(torch.from_numpy(y)).numpy()


def _mismatches(lengths, dtype, seed: int, num_threads: int | None = None) -> tuple[list, int]:
    if num_threads is None and mkl_dot_isa() == "sse2":
        # MKL's SSE2 kernel (CPUs not made by Intel) splits long sums across threads in an order torch_dot does
        # not reproduce (its docstring): the lengths are checked on one thread on both sides.
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _mismatches(lengths, dtype, seed, num_threads=1)
        finally:
            torch.set_num_threads(before)
    rng = np.random.default_rng(seed)
    ours_bad, numpy_bad = [], 0
    for kind in ("gaussian", "wide", "cancelling"):
        for n in lengths:
            x, y = _vectors(rng, kind, n, dtype)
            theirs = _torch(x, y)
            ours = np.asarray(torch_dot(x, y, num_threads=num_threads))
            assert ours.dtype == theirs.dtype
            if ours.tobytes() != theirs.tobytes():
                ours_bad.append((kind, n, float(ours), float(theirs)))
            numpy_bad += np.asarray(np.dot(x, y)).tobytes() != theirs.tobytes()
    return ours_bad, numpy_bad


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_torch_bit_for_bit(dtype):
    """Every length 1-139 and the block and thread boundaries up to 12345, three value distributions: all
    bit-identical to torch (NumPy's BLAS differs from torch on about 70% of them: the test has teeth)."""
    ours_bad, numpy_bad = _mismatches(_SHORT + _LONG, dtype, seed=0)
    assert not ours_bad, ours_bad[:5]
    assert numpy_bad > len(_SHORT)


@needs_mkl
@pytest.mark.parametrize("threads", [1, 3])
def test_thread_split_follows_torch_num_threads(threads):
    """Above 4095 (float64) / 8191 (float32) elements MKL splits the sum across torch's intra-op threads;
    with ``torch.set_num_threads(threads)`` and the same ``num_threads`` the sums stay bit-identical."""
    if threads > 1 and mkl_dot_isa() == "sse2":
        pytest.skip("MKL's SSE2 kernel's thread split is not reproduced")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for dtype in (np.float64, np.float32):
            ours_bad, _ = _mismatches([4096, 6001, 8192, 8193, 20001], dtype, seed=threads, num_threads=threads)
            assert not ours_bad, ours_bad[:5]
    finally:
        torch.set_num_threads(before)


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_special_values(dtype):
    """Signed zeros (MKL's accumulators start at +0, so ``[-1] . [0]`` is +0), infinities, NaN, huge and
    subnormal magnitudes (the exact fallback path) and the empty vector."""
    finfo = np.finfo(dtype)
    cases = [([-1.0], [0.0]), ([-0.0, -0.0], [1.0, 1.0]), ([], []), ([np.inf, 1.0], [1.0, 2.0]),
             ([np.inf, 1.0], [-1.0, 0.0]), ([np.nan, 1.0], [1.0, 1.0]),
             ([finfo.max / 4] * 5, [2.0, -2.0, 2.0, -2.0, 1.5]),
             ([finfo.tiny * 3] * 9, [0.5, 0.25, -0.75, 0.125, 1.0, 0.5, 0.5, 0.25, 0.125])]
    rng = np.random.default_rng(5)
    x = rng.standard_normal(77) * 2.0 ** rng.integers(-600 if dtype == np.float64 else -70, 0, 77)
    cases.append((x, rng.standard_normal(77) * 1e-30))
    for x, y in cases:
        x, y = np.asarray(x, dtype), np.asarray(y, dtype)
        theirs, ours = _torch(x, y), np.asarray(torch_dot(x, y))
        if np.isnan(theirs):
            assert np.isnan(ours)
        else:
            assert ours.tobytes() == theirs.tobytes(), (x, y, ours, theirs)


@needs_mkl
@pytest.mark.parametrize("n", [64, 2048, 2080])  # the NumPy steps, the XLA loop (64 blocks), the loop and a tail
def test_a_fused_step_that_two_roundings_would_tie_wrongly(n):
    """Lane 0 holds ``1 + 2**-52``; a later product ``2**-53 - 2**-113`` (inexact in float64) must leave it there
    (the fused sum is just below the tie), while rounding ``A + p`` and then adding ``e`` lands on the tie and
    rounds to ``1 + 2**-51``: the round-to-odd step decides."""
    if mkl_dot_isa() == "sse2":
        pytest.skip("MKL's SSE2 kernel rounds each product: it has no fused steps")
    x, y = np.zeros(n), np.zeros(n)
    x[0], y[0] = 1.0, 1 + 2.0**-52
    k = (n // 32 - 1) * 32  # lane 0 of the last full block
    x[k], y[k] = 1 + 2.0**-30, 2.0**-53 * (1 - 2.0**-30)
    theirs = _torch(x, y)
    assert theirs == 1 + 2.0**-52
    assert np.asarray(torch_dot(x, y)).tobytes() == theirs.tobytes()


def test_torchs_errors():
    for x, y in [(np.ones(3), np.ones(4)), (np.ones((3, 1)), np.ones(3)), (np.ones(3, np.float32), np.ones(3))]:
        with pytest.raises(RuntimeError) as ours:
            torch_dot(x, y)
        with pytest.raises(RuntimeError) as theirs:
            torch.from_numpy(x).dot(torch.from_numpy(y))
        assert str(ours.value) == str(theirs.value)


def test_kernel_choice_reads_mkls_switches(monkeypatch):
    """MKL's own switches cap the kernel; choices that take kernels not reproduced give ``None``."""
    for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
        monkeypatch.delenv(var, raising=False)
    native = mkl_dot_isa()
    if native == "sse2":  # CPUs not made by Intel: MKL's SSE2 kernel whatever the switches say (measured)
        for var, value in [("MKL_ENABLE_INSTRUCTIONS", "SSE4_2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
                           ("MKL_CBWR", "COMPATIBLE"), ("MKL_CBWR", "AVX2,STRICT")]:
            monkeypatch.setenv(var, value)
            assert mkl_dot_isa() == "sse2"
            monkeypatch.delenv(var)
        return
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "SSE4_2")
    assert mkl_dot_isa() is None
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX512")
    assert mkl_dot_isa() == native
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert mkl_dot_isa() is None
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    assert mkl_dot_isa() == (None if native is None else "avx2")


@needs_mkl
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_long_vectors_and_more_seeds(dtype):
    """Lengths up to 100003 (threaded on every thread count above one) over three more seeds."""
    lengths = [2047, 2048, 16383, 16384, 16385, 65536, 99999, 100003] + list(range(140, 300, 7))
    for seed in (1, 2, 3):
        ours_bad, _ = _mismatches(lengths, dtype, seed=seed)
        assert not ours_bad, ours_bad[:5]


_SUBPROCESS = """
import numpy as np
from tests.optim.test_lbfgs_dot import _SHORT, _LONG, _mismatches
from jax_impl.optim.lbfgs_dot import mkl_dot_isa
print(mkl_dot_isa(), *(len(_mismatches(_SHORT + _LONG, dtype, seed=4)[0]) for dtype in (np.float64, np.float32)))
"""


@needs_mkl
@pytest.mark.slow
@pytest.mark.parametrize("env", [{"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, {"MKL_CBWR": "AVX2"},
                                 {"ATEN_CPU_CAPABILITY": "default"}])
def test_other_mkl_kernels_in_a_subprocess(env):
    """MKL's AVX2 kernels (chosen by either switch on Intel CPUs) are reproduced too; ATen's own capability
    does not enter. On other CPUs the switches leave MKL's SSE2 kernel in place."""
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS], env={**os.environ, **env, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, check=True).stdout.split()
    expected = "avx2" if "AVX2" in env.values() and mkl_dot_isa() != "sse2" else mkl_dot_isa()
    assert out == [expected, "0", "0"]
