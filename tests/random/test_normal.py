"""Normal draws on torch's CPU stream: ``Generator.normal`` / ``randn`` / ``normal`` against real torch, bit for bit.

torch's ``normal_kernel`` has a vectorised path (16 elements or more:
uniforms for the whole tensor, Box-Muller over blocks of 16, the last block
redrawn) and a scalar one (fewer: ``normal_distribution<double>``, whose
second value waits in the generator). The grids cross both, around 16 and
its multiples, every dtype torch dispatches, several means and stds, and
interleave normal draws with the other draws of the stream; after every
call the generator's state bytes must equal ``torch.get_rng_state()``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import jax_impl.random as jr
from jax_impl.random import Generator

_DTYPES = [(np.float32, torch.float32), (np.float64, torch.float64), (np.float16, torch.float16),
           (ml_dtypes.bfloat16, torch.bfloat16)]
_SIZES = [*range(1, 41), 47, 48, 49, 64, 255, 256, 257, 1000, 4099]


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(f"u{np.asarray(x).dtype.itemsize}")


def _same(ours: np.ndarray, theirs: torch.Tensor) -> None:
    theirs_np = theirs.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[theirs.element_size()]).numpy()
    assert ours.shape == tuple(theirs.shape)
    mismatched = int((_bits(ours) != theirs_np.view(_bits(ours).dtype)).sum())
    assert mismatched == 0, f"{mismatched} of {ours.size} values differ"


def _state_equal(g: Generator, t: torch.Generator) -> None:
    assert bytes(g.get_state()) == bytes(t.get_state().numpy())


@pytest.mark.parametrize(("np_dtype", "torch_dtype"), _DTYPES, ids=lambda d: str(np.dtype(d)) if not
                         isinstance(d, torch.dtype) else "")
def test_normal_matches_torch_for_every_size_dtype_mean_and_std(np_dtype, torch_dtype):
    """Two draws per case (the second small draw starts from the cached value), state bytes after each."""
    rng = np.random.default_rng(0)
    for n in _SIZES:
        mean, std = (0.0, 1.0) if n % 3 == 0 else (float(rng.normal()), float(rng.uniform(0, 3)))
        seed = int(rng.integers(0, 2**63))
        t, g = torch.Generator().manual_seed(seed), Generator(seed)
        for _ in range(2):
            theirs = torch.empty(n, dtype=torch_dtype).normal_(mean, std, generator=t)
            _same(g.normal(n, mean, std, np_dtype), theirs)
            _state_equal(g, t)


def test_normal_interleaved_with_every_other_draw_keeps_the_stream():
    """randn of many sizes mixed with rand, randint, randperm, bernoulli and small normals; shapes of 2-3 dims."""
    rng = np.random.default_rng(1)
    t, g = torch.Generator().manual_seed(1234), Generator(1234)
    for _ in range(60):
        kind = int(rng.integers(0, 6))
        shape = tuple(int(v) for v in rng.integers(1, 7, size=int(rng.integers(1, 4))))
        if kind == 0:
            _same(g.randn(shape), torch.randn(shape, generator=t))
        elif kind == 1:
            _same(g.normal(shape, 0.5, 0.1, np.float64), torch.empty(shape, dtype=torch.float64).normal_(
                0.5, 0.1, generator=t))
        elif kind == 2:
            np.testing.assert_array_equal(g.rand(shape), torch.rand(shape, generator=t).numpy())
        elif kind == 3:
            np.testing.assert_array_equal(g.randint(0, 10, shape), torch.randint(0, 10, shape, generator=t).numpy())
        elif kind == 4:
            np.testing.assert_array_equal(g.randperm(9), torch.randperm(9, generator=t).numpy())
        else:
            np.testing.assert_array_equal(g.bernoulli(shape, 0.3),
                                          torch.empty(shape).bernoulli_(0.3, generator=t).bool().numpy())
        _state_equal(g, t)
    # A cached normal survives get_state/set_state on both sides.
    torch.empty(3).normal_(generator=t)
    g.normal(3)
    g2, t2 = Generator().set_state(g.get_state()), torch.Generator().set_state(t.get_state())
    _same(g2.normal(5, dtype=np.float64), torch.empty(5, dtype=torch.float64).normal_(generator=t2))


def test_factories_match_torchs_every_overload():
    torch.manual_seed(7)
    jr.manual_seed(7)
    _same(jr.randn(2, 3), torch.randn(2, 3))
    _same(jr.randn((4, 5), dtype=np.float64), torch.randn((4, 5), dtype=torch.float64))
    m_t, s_t = torch.rand(3, 20), torch.rand(20)
    m_j, s_j = jr.rand(3, 20), jr.rand(20)
    _same(m_j, m_t)
    _same(jr.normal(m_j, s_j), torch.normal(m_t, s_t))
    _same(jr.normal(m_j, 0.5), torch.normal(m_t, 0.5))
    _same(jr.normal(0.2, s_j), torch.normal(0.2, s_t))
    _same(jr.normal(0.1, 2.0, (7, 3)), torch.normal(0.1, 2.0, (7, 3)))
    x_t = torch.rand(6, 4, dtype=torch.float64)
    x_j = jr.rand(6, 4, dtype=np.float64)
    _same(x_j, x_t)
    _same(jr.randn_like(x_j), torch.randn_like(x_t))
    _same(jr.rand_like(x_j), torch.rand_like(x_t))
    np.testing.assert_array_equal(jr.randint(3, 9, (5,)), torch.randint(3, 9, (5,)).numpy())
    _same(jr.bernoulli(m_j), torch.bernoulli(m_t))
    _same(jr.bernoulli(x_j), torch.bernoulli(x_t))
    np.testing.assert_array_equal(jr.multinomial(m_j, 4, True), torch.multinomial(m_t, 4, True).numpy())
    np.testing.assert_array_equal(jr.multinomial(m_j[0], 1), torch.multinomial(m_t[0], 1).numpy())
    assert bytes(jr.get_rng_state()) == bytes(torch.get_rng_state().numpy())


def test_bad_arguments_raise_torchs_errors():
    g = Generator(0)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0.0, but found std -1"):
        g.normal(3, 0.0, -1.0)
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        jr.normal(0.0, np.array([1.0, -0.5], np.float32))
    with pytest.raises(RuntimeError, match="\"normal_kernel_cpu\" not implemented for 'Long'"):
        g.normal(3, dtype=np.int64)
    assert g.normal((0, 4)).shape == (0, 4)


_SUBPROCESS = r"""
import numpy as np, torch
from jax_impl.random import Generator
for n in (5, 16, 17, 40, 333):
    for dt, tdt in ((np.float32, torch.float32), (np.float64, torch.float64), (np.float16, torch.float16)):
        t = torch.Generator().manual_seed(n)
        ours = Generator(n).normal(n, 0.25, 1.5, dt)
        theirs = torch.empty(n, dtype=tdt).normal_(0.25, 1.5, generator=t).numpy()
        assert ours.tobytes() == theirs.tobytes(), (n, dt)
print(torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_each_kernel_torch_dispatches_is_reproduced(capability):
    """``ATEN_CPU_CAPABILITY`` picks torch's kernels (``default``: the C library's ``logf``/``cosf``/``sinf`` and
    no contraction; ``avx2``: ``avx_mathfun.h`` with fused multiply-adds); jax_impl follows the same variable."""
    if capability == "avx2" and "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("this CPU has no AVX2")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == capability.upper()
