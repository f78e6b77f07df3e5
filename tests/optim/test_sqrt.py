"""torch's CPU sqrt reproduced: ``_mkl_sqrt`` (MKL VML's AVX-512 kernel, emulated) and ``_table_sqrt``
(torch's own float32 values on [1, 4), any CPU)."""

import jax
import numpy as np
import pytest
import torch

from jax_impl.optim._mkl_sqrt import torch_sqrt_f32, torch_sqrt_f64
from jax_impl.optim._table_sqrt import PACKED_SIZE, pack_table, table_sqrt
from parity.numerics import probe_torch_sqrt, torch_sqrt_table
from tests.optim import _harness as H

needs_mkl = pytest.mark.skipif(H.torch_sqrt_kind() != "mkl-avx512", reason="torch's CPU sqrt here is not MKL's AVX-512 kernel")


def assert_bitwise_equal(ours, ref, x):
    width = {4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    bad = np.asarray(ours).view(width) != ref.view(width)
    assert not bad.any(), f"{bad.sum()} of {x.size} differ, e.g. x={x[bad][:4]} ours={np.asarray(ours)[bad][:4]} torch={ref[bad][:4]}"


def assert_documented_agreement(ours, ref, x):
    """Bit-identical on normal non-negative inputs, zeros and +inf; NaN where torch gives NaN
    (torch's +NaN for negatives and our NaN differ in the sign bit only); subnormal inputs give
    0, as XLA:CPU flushes every subnormal to zero (torch keeps them: documented limitation)."""
    ours = np.asarray(ours)
    finfo = np.finfo(x.dtype)
    subnormal = (x != 0) & (np.abs(x) < finfo.tiny) & ~np.isnan(x)
    nan_expected = np.isnan(ref) & ~subnormal
    exact = ~subnormal & ~nan_expected
    assert_bitwise_equal(ours[exact], ref[exact], x[exact])
    assert np.isnan(ours[nan_expected]).all()
    assert (ours[subnormal & (x > 0)] == 0).all()


def torch_sqrt_numpy(x):
    return torch.sqrt(torch.from_numpy(x)).numpy()


def test_probe_returns_a_known_mode():
    assert probe_torch_sqrt() in ("mkl-avx512", "ieee", "table", None)
    assert H.torch_sqrt_kind() == probe_torch_sqrt()


@needs_mkl
def test_f32_every_float_in_1_to_4():
    # [1, 4) covers both exponent parities, i.e. every mantissa path of the kernel: 2^24 values.
    x = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    ref = torch_sqrt_numpy(x)
    assert (ref != np.sqrt(x)).any()  # torch is not IEEE here, so the test has teeth
    assert_bitwise_equal(jax.jit(torch_sqrt_f32)(x), ref, x)


@needs_mkl
def test_f32_random_bits_subnormals_and_specials():
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    subnormals = np.arange(1, 1 << 23, 97, dtype=np.uint32).view(np.float32)
    f32 = np.finfo(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, -1.0, -f32.tiny, -1e-45, 1e-45, f32.tiny, f32.max], np.float32)
    x = np.concatenate([random_bits, subnormals, -subnormals, specials])
    with np.errstate(invalid="ignore"):
        assert_documented_agreement(jax.jit(torch_sqrt_f32)(x), torch_sqrt_numpy(x), x)


@needs_mkl
def test_f64_mixed_values():
    rng = np.random.default_rng(1)
    n = 1 << 20
    wide = rng.random(n) * 10.0 ** rng.integers(-307, 308, n)
    random_bits = rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    f64 = np.finfo(np.float64)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, -5e-324, f64.tiny, f64.max, 1.0, 4.0 - 2**-51])
    x = np.concatenate([np.linspace(1.0, 4.0, n, endpoint=False), wide, random_bits, specials])
    ref = torch_sqrt_numpy(x)
    with H.numerics("float64"):
        ours = np.asarray(jax.jit(torch_sqrt_f64)(x))
    assert_documented_agreement(ours, ref, x)


def test_table_sqrt_is_torchs_float32_sqrt_everywhere():
    """The table of torch's sqrt on [1, 4) gives torch's sqrt for random bit patterns over the whole range
    (normal inputs bit for bit; specials and subnormals as documented), on any CPU whose kernel is
    scale-invariant, which the probe checks; this machine's kind is reported in the skip reason."""
    if probe_torch_sqrt() not in ("table", "mkl-avx512", "ieee"):
        pytest.skip("torch's float32 sqrt here is not scale-invariant: no table reproduces it")
    rng = np.random.default_rng(3)
    random_bits = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f32 = np.finfo(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -f32.tiny, 1e-45, f32.tiny, f32.max,
                         np.nextafter(np.float32(4.0), np.float32(0.0)), 1.0, 2.0, 4.0], np.float32)
    x = np.concatenate([random_bits, specials])
    # The top half-binade [2**127, 2**128) is not scale-invariant on the AMD EPYC (2048 of its 8.4 M values
    # are 1 ULP apart: MKL's overflow guard); an optimizer's squared gradients never get there.
    x = x[~(np.abs(x) >= np.float32(2.0**127))]
    ours = jax.jit(table_sqrt)(x, torch_sqrt_table())
    assert_documented_agreement(ours, torch_sqrt_numpy(x), x)


def test_packed_table_is_the_table_on_every_float_in_1_to_4():
    """The two-bit form the optimizers compile gives the table's values on all 2**24 inputs of [1, 4) (so
    everywhere, by scale invariance), against torch's own sqrt of those inputs; where torch is IEEE or
    MKL's AVX-512 kernel the table packs too (every value within one ULP of the correctly rounded root)."""
    table = torch_sqrt_table()
    packed = pack_table(table)
    assert packed is not None and packed.dtype == np.uint32 and packed.shape == (PACKED_SIZE,)
    x = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    assert_bitwise_equal(jax.jit(table_sqrt)(x, packed), torch_sqrt_numpy(x), x)


def test_a_table_more_than_one_ulp_from_ieee_keeps_its_values():
    """A value two ULPs from the correctly rounded root does not pack (``None``): the optimizers then
    compile the full table, never a wrong root."""
    x = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    table = np.sqrt(x)
    assert pack_table(table) is not None
    for index in (12345, len(table) - 1):  # in the first run of values packed and in the last
        bad = table.copy()
        bad.view(np.int32)[index] += 2
        assert pack_table(bad) is None
    with pytest.raises(ValueError, match="float32"):
        pack_table(table[:10])



def test_registered_table_is_compiled_packed_where_it_packs(monkeypatch):
    """``set_sqrt_table`` keeps the values and their two-bit form; a table that does not pack is compiled whole."""
    from jax_impl.optim import _sqrt, get_sqrt_table, set_sqrt_table

    for name in ("_sqrt_table", "_packed_table"):  # the process's registered table comes back afterwards
        monkeypatch.setattr(_sqrt, name, getattr(_sqrt, name))
    x = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    table = np.sqrt(x)
    set_sqrt_table(table)
    assert get_sqrt_table() is table
    assert get_sqrt_table(packed=True).shape == (PACKED_SIZE,)
    table = table.copy()
    table.view(np.int32)[7] -= 2
    set_sqrt_table(table)
    assert get_sqrt_table(packed=True) is table
