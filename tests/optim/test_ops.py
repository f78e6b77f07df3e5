"""``jax_impl.kernels.TorchOps``: each primitive against the torch kernel it spells, under jax.jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jax_impl.kernels import TorchOps, runtime_zero
from jax_impl.optim import torch_sqrt
from tests.optim import _harness as H

N = 1 << 18
SCALARS = {"alpha": -0.0123, "s": 0.9, "value": 0.37, "div": 0.9987}  # non-representable decimals: real roundings
LERP_WEIGHTS = (0.1, 0.4999, 0.5, 0.9, 1.3, -0.2)  # both ATen branches (|w| < 0.5 and otherwise)


def random_arrays(dtype, rng):
    def one():
        return (rng.standard_normal(N) * 10.0 ** rng.uniform(-3, 3, N)).astype(dtype)

    a, b, t1 = one(), one(), one()
    t2 = np.abs(one()) + np.asarray(1e-3, dtype)  # divisors away from 0
    return a, b, t1, t2


def jax_results(count, a, b, t1, t2, scalars, sqrt_mode):
    """Every primitive in one compiled function, as inside an optimizer kernel."""
    ops = TorchOps(runtime_zero(count), lambda x: torch_sqrt(x, sqrt_mode))
    c = {k: v.astype(a.dtype) for k, v in scalars.items()}
    out = {
        "add": ops.add(a, b, alpha=c["alpha"]),
        "add_one": ops.add(a, b),
        "mul": ops.mul(a, c["s"]),
        "mul_then_add": ops.add(ops.mul(a, c["s"]), b, alpha=c["alpha"]),  # the product must round before the FMA
        "addcmul": ops.addcmul(a, t1, t2, value=c["value"]),
        "addcmul_one": ops.addcmul(a, t1, t2),
        "mul_then_addcmul": ops.addcmul(ops.mul(a, c["s"]), t1, t1, value=c["value"]),
        "addcdiv": ops.addcdiv(a, t1, t2, value=c["value"]),
        "addcdiv_one": ops.addcdiv(a, t1, t2),
        "div_scalar": ops.div_scalar(a, c["div"]),
        "reciprocal": ops.reciprocal(t2),
        "reciprocal_then_mul": ops.mul(ops.reciprocal(t2), c["s"]),
        "sqrt": ops.sqrt(t2),
        "sqrt_plus_eps_div": ops.div_scalar(ops.sqrt(t2), c["div"]) + c["value"],
    }
    for i, w in enumerate(LERP_WEIGHTS):
        out[f"lerp{i}"] = ops.lerp(a, b, jnp.asarray(w, a.dtype))
    return out


def torch_results(a, b, t1, t2, s):
    a, b, t1, t2 = map(torch.from_numpy, (a, b, t1, t2))
    out = {
        "add": a.add(b, alpha=s["alpha"]),
        "add_one": a.add(b),
        "mul": a.mul(s["s"]),
        "mul_then_add": a.mul(s["s"]).add(b, alpha=s["alpha"]),
        "addcmul": a.addcmul(t1, t2, value=s["value"]),
        "addcmul_one": a.addcmul(t1, t2),
        "mul_then_addcmul": a.mul(s["s"]).addcmul(t1, t1, value=s["value"]),
        "addcdiv": a.addcdiv(t1, t2, value=s["value"]),
        "addcdiv_one": a.addcdiv(t1, t2),
        "div_scalar": a / s["div"],
        "reciprocal": t2.reciprocal(),
        "reciprocal_then_mul": t2.reciprocal().mul(s["s"]),
        "sqrt": t2.sqrt(),
        "sqrt_plus_eps_div": (t2.sqrt() / s["div"]).add_(s["value"]),
    }
    for i, w in enumerate(LERP_WEIGHTS):
        out[f"lerp{i}"] = a.lerp(b, w)
    return out


@pytest.mark.parametrize("dtype", H.DTYPES)
def test_torch_ops_match_torch_kernels(dtype, np_rng):
    a, b, t1, t2 = random_arrays(dtype, np_rng)
    # torch's kernels take the Python-float scalar; ours get it rounded to the
    # tensor dtype, as optimizers pass host scalars. Use values exact in the
    # dtype so both sides see the same number.
    scalars = {k: float(np.asarray(v, dtype)) for k, v in SCALARS.items()}
    expected = torch_results(a, b, t1, t2, scalars)
    mode = H.torch_sqrt_kind() or "ieee"
    with H.numerics(dtype):
        got = jax.jit(jax_results, static_argnums=6)(
            jnp.int32(7), *map(jnp.asarray, (a, b, t1, t2)), {k: jnp.asarray(v, jnp.float64 if dtype == "float64" else jnp.float32) for k, v in scalars.items()}, mode
        )
        got = H.to_numpy(got)
    if not H.bit_identical_expected("sqrt", dtype):  # sqrt not reproduced: only sqrt-free primitives are exact
        for key in ("sqrt", "sqrt_plus_eps_div"):
            expected.pop(key), got.pop(key)
    assert H.bitwise_equal({k: v.numpy() for k, v in expected.items()}, got), H.compare(expected, got).table()


@pytest.mark.parametrize("dtype", H.DTYPES)
def test_sqrt_modes(dtype, np_rng):
    """"ieee" is the correctly rounded sqrt; "mkl-avx512" is torch's on AVX-512 MKL builds; "table" reads
    torch's own float32 values on [1, 4) (any other CPU, e.g. AMD: 17% of them differ from IEEE there)."""
    x = np.abs(np_rng.standard_normal(N) * 10.0 ** np_rng.uniform(-30, 30, N)).astype(dtype)
    with H.numerics(dtype):
        sqrt = jax.jit(lambda count, x, mode: TorchOps(runtime_zero(count), lambda y: torch_sqrt(y, mode)).sqrt(x),
                       static_argnums=2)
        ieee = np.asarray(sqrt(jnp.int32(0), jnp.asarray(x), "ieee"))
        mkl = np.asarray(sqrt(jnp.int32(0), jnp.asarray(x), "mkl-avx512"))
        kind = H.torch_sqrt_kind()
        ours = {"ieee": ieee, "mkl-avx512": mkl}.get(kind)
        if kind == "table":
            ours = np.asarray(sqrt(jnp.int32(0), jnp.asarray(x), "table"))
    assert H.bitwise_equal({"x": ieee}, {"x": np.sqrt(x)})
    if ours is not None and H.bit_identical_expected("sqrt", dtype):
        ref = torch.from_numpy(x).sqrt().numpy()
        assert H.bitwise_equal({"x": ours}, {"x": ref})
    # MKL's kernel is faithful (within 1 ULP of IEEE) but not correctly rounded.
    assert H.compare({"x": ieee}, {"x": mkl}, max_ulp=1).passed


def test_lerp_branch_is_atens_choice_or_none():
    from jax_impl.kernels import lerp_branch

    assert lerp_branch(0.1) is True and lerp_branch(0.5) is False and lerp_branch(-0.7) is False
    assert lerp_branch(lambda k: 0.1) is None and lerp_branch(None) is None
    # float32 rounds 0.5 - 2**-30 up to 0.5 (ATen's float32 kernels take the other branch): undecided.
    assert lerp_branch(0.5 - 2.0**-30) is None
