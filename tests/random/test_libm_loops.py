"""jax_impl.random._libm_loops: the interpreted maps and the numba loops give torch's exponential, multinomial
and float64 normal draws bit for bit (torch run in the test)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from jax_impl.random import Generator, _libm_loops

# A seeded grid: sizes across the loop's vector tails, rates on both sides of 1, both float widths.
_CASES = [(seed, size, lambd, dtype) for seed, size, lambd, dtype in zip(
    range(6), (1, 7, 1000, 4099, 65_536, 200_003), (1.0, 0.25, 3.5, 1.0, 17.0, 1e-3),
    (np.float32, np.float64, np.float32, np.float64, np.float32, np.float64), strict=True)]


@pytest.fixture(params=["mapped", "compiled"])
def path(request, monkeypatch) -> str:
    """Each draw through the interpreted map, or through the compiled loop from the first element."""
    if request.param == "compiled":
        if _libm_loops._kernels() is None:
            pytest.skip("numba absent")
        monkeypatch.setattr(_libm_loops, "_MAPPED", [_libm_loops._COMPILE_AFTER])
    else:
        monkeypatch.setattr(_libm_loops, "_MAPPED", [0])
        monkeypatch.setattr(_libm_loops, "_COMPILE_AFTER", sys.maxsize)
    return request.param


@pytest.mark.parametrize("seed,size,lambd,dtype", _CASES)
def test_exponential_is_torchs(path: str, seed: int, size: int, lambd: float, dtype: type) -> None:
    g, t = Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    ours = g.exponential(size, lambd, dtype)
    ref = torch.empty(size, dtype=torch.float32 if dtype == np.float32 else torch.float64).exponential_(
        lambd, generator=t).numpy()
    assert ours.tobytes() == ref.tobytes()
    np.testing.assert_array_equal(g.rand(5), torch.rand(5, generator=t).numpy())  # the streams still agree


@pytest.mark.parametrize("seed,shape,mean,std", [(0, (16,), 0.0, 1.0), (1, (1000, 3), 0.5, 2.0),
                                                 (2, (65_537,), -3.0, 0.1)])
def test_float64_normals_are_torchs(path: str, seed: int, shape: tuple, mean: float, std: float) -> None:
    """``normal_(mean, std)`` in float64 from 16 values up: Box-Muller in blocks of 16 with the C library's
    ``log``, ``cos`` and ``sin``."""
    g, t = Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    ours = g.normal(shape, mean, std, np.float64)
    ref = torch.empty(shape, dtype=torch.float64).normal_(mean, std, generator=t).numpy()
    assert ours.tobytes() == ref.tobytes()


def test_multinomial_rows_are_torchs(path: str) -> None:
    """A categorical sample over a 10,000-word vocabulary, 8 rows (the exponential trick: ``argmax(w / q)``)."""
    probs = np.random.default_rng(1).random((8, 10_000), dtype=np.float32)
    g, t = Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(3):
        np.testing.assert_array_equal(g.multinomial(probs, 1),
                                      torch.multinomial(torch.from_numpy(probs), 1, generator=t).numpy())


def test_the_map_compiles_once_it_has_spent_a_compile(monkeypatch) -> None:
    """Below ``_COMPILE_AFTER`` mapped elements nothing is compiled; from there the compiled loop runs, and
    its results are the C library's ``log1p`` of every value, zero and the largest uniform included."""
    if _libm_loops._kernels() is None:
        pytest.skip("numba absent")
    monkeypatch.setattr(_libm_loops, "_MAPPED", [0])
    monkeypatch.setattr(_libm_loops, "_COMPILE_AFTER", 10)
    u = np.array([0.0, 2.0**-53, 0.5, 1.0 - 2.0**-53, 0.75, 1e-300, 2.0**-30], np.float64)
    expected = np.array([math.log1p(-v) for v in u])
    assert _libm_loops.log1p_of_minus(u).tobytes() == expected.tobytes()
    assert _libm_loops._MAPPED == [7]  # mapped: below the threshold
    _libm_loops.log1p_of_minus(u)
    assert _libm_loops._MAPPED == [14]
    assert _libm_loops.log1p_of_minus(u).tobytes() == expected.tobytes()
    assert _libm_loops._MAPPED == [14]  # compiled: the map took nothing more
