"""``jax_impl.optim.lbfgs_sum.torch_sum`` against ``torch.sum`` of a contiguous 1-D CPU tensor (ATen's
``cascade_sum``), bit for bit: every length up to 299, the cascade's block boundaries up to 32767, signed,
non-negative and wide-exponent values, float64 and float32."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from jax_impl.optim.lbfgs_sum import GRAIN_SIZE, torch_sum

_LENGTHS = list(range(0, 300)) + [511, 512, 513, 1000, 4095, 4096, 4097, 10000, 16383, 16384, 16385, GRAIN_SIZE - 1]


def _mismatches(dtype, seed: int) -> tuple[list, int]:
    rng = np.random.default_rng(seed)
    ours_bad, numpy_bad = [], 0
    for kind in ("signed", "absolute", "wide"):
        for n in _LENGTHS:
            x = rng.standard_normal(n)
            if kind != "signed":
                x = np.abs(x)  # LBFGS sums |g|
            if kind == "wide":
                x = x * 2.0 ** rng.integers(-20, 20, n)
            x = x.astype(dtype)
            theirs = torch.from_numpy(x).sum().numpy()
            ours = np.asarray(torch_sum(x))
            assert ours.dtype == theirs.dtype
            if ours.tobytes() != theirs.tobytes():
                ours_bad.append((kind, n, float(ours), float(theirs)))
            numpy_bad += np.asarray(x.sum()).tobytes() != theirs.tobytes()
    return ours_bad, numpy_bad


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_torch_bit_for_bit(dtype):
    """All bit-identical (NumPy's pairwise sum differs from torch's on about 60% of them)."""
    ours_bad, numpy_bad = _mismatches(dtype, seed=0)
    assert not ours_bad, ours_bad[:5]
    assert numpy_bad > 100


def test_long_vectors_are_numpys_sum():
    x = np.random.default_rng(1).standard_normal(GRAIN_SIZE)
    assert torch_sum(x) == x.sum()


@pytest.mark.slow
def test_aten_capabilities_in_a_subprocess():
    """ATen's ``default`` and ``avx2`` kernels sum in the same order (``Vectorized`` is 32 bytes in both)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    script = ("import numpy as np\nfrom tests.optim.test_lbfgs_sum import _mismatches\n"
              "print(*(len(_mismatches(d, seed=2)[0]) for d in (np.float64, np.float32)))")
    for capability in ("default", "avx2"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(root)}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["0", "0"], capability
