"""parity.compare on torch objects vs JAX pytrees, with cases of known distance."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from parity import assert_parity, compare


def bump_ulps(x: np.ndarray, k: int) -> np.ndarray:
    """x moved k ULPs up (towards +inf) through k nextafter steps."""
    out = x.copy()
    for _ in range(k):
        out = np.nextafter(out, np.array(np.inf, dtype=x.dtype))
    return out


def test_one_ulp_float32_scalar():
    one = np.float32(1.0)
    report = compare(torch.tensor(one), np.nextafter(one, np.float32(2)))
    assert report.max_ulp == 1
    assert report.max_abs == pytest.approx(2.0**-23)
    assert report.max_rel == pytest.approx(2.0**-23, rel=1e-6)
    assert not report.passed  # default tolerances demand exact equality
    assert compare(torch.tensor(one), np.nextafter(one, np.float32(2)), max_ulp=1).passed


def test_count_across_zero():
    tiny = np.nextafter(np.float32(0), np.float32(1))
    ref = torch.tensor([tiny, -tiny, 0.0, -0.0], dtype=torch.float32)
    cand = jnp.array([-tiny, tiny, -0.0, 0.0], dtype=jnp.float32)
    report = compare(ref, cand)
    assert report.max_ulp == 2
    # +0 vs -0 are equal values (distance 0) but not bit-identical.
    leaf = report.leaves[0]
    assert leaf.frac_identical == 0.0
    assert leaf.failing == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("k", [0, 1, 3, 17])
def test_known_ulp_offsets(dtype, k):
    rng = np.random.default_rng(k)
    base = rng.standard_normal((5, 7)).astype(str(dtype).split(".")[1])
    moved = base.copy()
    moved[2, 3] = bump_ulps(base[2:3, 3], k)[0]
    # NumPy on the candidate side: jnp would silently hold float64 as float32 without x64.
    report = compare({"w": torch.from_numpy(base)}, {"w": moved})
    assert report.max_ulp == k
    leaf = report.leaves[0]
    assert leaf.frac_identical == pytest.approx(1.0 if k == 0 else 34 / 35)
    if k:
        assert leaf.worst_index == (2, 3)


def test_state_dict_vs_nnx_state_paths():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    sd = model.state_dict()
    # num_batches_tracked is int64 in torch; JAX without x64 would make it int32.
    as_jax = lambda t: jnp.asarray(t.numpy()) if t.is_floating_point() else t.numpy()
    jax_tree = {
        "0": {"weight": as_jax(sd["0.weight"]), "bias": as_jax(sd["0.bias"])},
        "1": {key[2:]: as_jax(value) for key, value in sd.items() if key.startswith("1.")},
    }
    report = compare(model, jax_tree)
    assert report.passed, report.table()
    assert {leaf.key for leaf in report.leaves} == set(sd)
    assert report.max_ulp == 0


def test_nnx_module_is_flattened_by_attribute_path():
    class Lin(nnx.Module):
        def __init__(self):
            self.weight = nnx.Param(jnp.ones((2, 3)))
            self.bias = nnx.Param(jnp.zeros((2,)))

    report = compare({"weight": torch.ones(2, 3), "bias": torch.zeros(2)}, Lin())
    assert report.passed, report.table()


def test_missing_unexpected_shape_and_dtype_are_reported_not_raised():
    ref = {"a": torch.zeros(3), "b": torch.zeros(2, 2), "c": torch.zeros(4), "d": torch.zeros(2)}
    cand = {"a": np.zeros(3, np.float32), "b": np.zeros((4,), np.float32), "c": np.zeros(4, np.float64), "e": np.zeros(1)}
    report = compare(ref, cand)
    status = {leaf.key: leaf.status for leaf in report.leaves}
    assert status == {"a": "ok", "b": "shape mismatch", "c": "dtype mismatch", "d": "missing", "e": "unexpected"}
    assert not report.passed
    table = report.table()
    for key in "abcde":
        assert key in table
    # Values are still measured across a dtype difference.
    assert next(l for l in report.leaves if l.key == "c").max_ulp == 0
    assert compare({"c": torch.zeros(4)}, {"c": np.zeros(4)}, check_dtype=False).passed


def test_nan_handling():
    ref = torch.tensor([np.nan, 1.0, np.nan, 2.0])
    same_nan = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    report = compare(ref, same_nan)
    assert report.passed and report.leaves[0].both_nan == 2 and report.max_ulp == 0
    assert not compare(ref, same_nan, equal_nan=False).passed
    one_sided = np.array([np.nan, np.nan, np.nan, 2.0], np.float32)
    leaf = compare(ref, one_sided, rtol=1.0, atol=1e9, max_ulp=10**9).leaves[0]
    assert leaf.nan_mismatch == 1 and leaf.status == "mismatch"


def test_inf_handling():
    ref = torch.tensor([np.inf, -np.inf, 1.0])
    assert compare(ref, np.array([np.inf, -np.inf, 1.0], np.float32)).passed
    leaf = compare(ref, np.array([np.inf, np.inf, 1.0], np.float32), atol=1e30).leaves[0]
    assert leaf.status == "mismatch" and leaf.max_abs == np.inf


def test_tolerances_are_elementwise_or():
    ref = torch.tensor([1.0, 1e-30])
    cand = np.array([1.0 + 2**-22, 2e-30], np.float32)  # 2 ULP at 1.0; huge ULP but tiny abs error near 0
    assert not compare(ref, cand, max_ulp=2).passed
    assert compare(ref, cand, max_ulp=2, atol=1e-29).passed
    assert compare(ref, cand, rtol=2.4e-7, atol=1e-29).passed
    assert not compare(ref, cand, rtol=1e-7, atol=1e-29).passed


def test_nested_lists_tuples_namedtuples_and_ints():
    class State(NamedTuple):
        count: np.ndarray
        mu: dict

    ref = {"state": [torch.tensor(3), (torch.ones(2), torch.zeros(1))], "opt": {"count": torch.tensor(5), "mu": {"w": torch.ones(2)}}}
    cand = {"state": [np.int64(3), [jnp.ones(2), jnp.zeros(1)]], "opt": State(count=np.int64(5), mu={"w": jnp.ones(2)})}
    report = compare(ref, cand)
    assert {leaf.key for leaf in report.leaves} == {"state.0", "state.1.0", "state.1.1", "opt.count", "opt.mu.w"}
    assert report.passed, report.table()
    bad = compare({"n": torch.tensor(5)}, {"n": np.int64(7)})
    assert bad.max_ulp == 2 and not bad.passed


def test_torch_optimizer_state_dict_keys():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p])
    p.grad = torch.ones(3)
    opt.step()
    ref = opt.state_dict()["state"]
    cand = {0: {"step": np.float32(1), "exp_avg": ref[0]["exp_avg"].numpy(), "exp_avg_sq": ref[0]["exp_avg_sq"].numpy()}}
    assert compare(ref, cand).passed


def test_bfloat16():
    ref = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    cand = jnp.array([1.0, 2.015625], dtype=jnp.bfloat16)  # 1 bf16 ULP at 2.0 is 2**-6
    report = compare(ref, cand)
    assert report.max_ulp == 1


def test_assert_parity_message_names_worst_leaf():
    ref = {"good": torch.ones(3), "bad": torch.ones(4), "worse": torch.ones(2)}
    cand = {"good": np.ones(3, np.float32), "bad": bump_ulps(np.ones(4, np.float32), 1), "worse": bump_ulps(np.ones(2, np.float32), 5)}
    with pytest.raises(AssertionError) as info:
        assert_parity(ref, cand, max_ulp=0)
    text = str(info.value)
    assert "worst leaf: worse" in text
    assert "good" in text and "bad" in text
    assert assert_parity(ref, cand, max_ulp=5).max_ulp == 5


def test_report_to_dict_round_trips_to_json():
    import json

    report = compare({"a": torch.ones(2)}, {"a": np.ones(2, np.float32)})
    data = json.loads(json.dumps(report.to_dict()))
    assert data["passed"] and data["leaves"][0]["key"] == "a"


def test_table_truncates_long_reports_but_keeps_failures():
    ref = {f"l{i}": torch.ones(1) for i in range(100)}
    cand = {f"l{i}": np.ones(1, np.float32) for i in range(100)}
    cand["l77"] = np.float32([2.0])
    table = compare(ref, cand).table(max_rows=10)
    assert "l77" in table and "90 more leaves not shown (0 of them failing)" in table


def test_rng_state_leaves_are_skipped_and_listed():
    """A Dropout's nnx Rngs (a PRNG key and a uint32 counter) has no torch counterpart: skipped, not a TypeError."""
    import jax

    import jax_impl.nn as jnn
    import jax_impl.random

    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Dropout(0.5))
    jax_impl.random.manual_seed(0)
    ours = jnn.Sequential(jnn.Linear(3, 2), jnn.Dropout(0.5, rngs=nnx.Rngs(0)))
    skipped = ("1.rngs.default.count", "1.rngs.default.key")
    for candidate in (ours, nnx.state(ours), nnx.to_pure_dict(nnx.state(ours))):  # the pure dict's count goes too
        report = compare(theirs.state_dict(), candidate)
        assert report.passed and sorted(report.skipped) == list(skipped)
        assert [leaf.key for leaf in report.leaves] == ["0.weight", "0.bias"]
        assert "2 RNG-state leaves skipped: 1.rngs.default.count, 1.rngs.default.key" in report.summary()
        assert report.to_dict()["skipped"] == list(report.skipped)
    # Key-dtype arrays in a plain pytree go too; torch's stream (no rngs) leaves nothing to skip.
    report = compare({"w": torch.ones(2)}, {"w": np.ones(2, np.float32), "key": jax.random.key(0),
                                            "keys": jax.random.split(jax.random.key(1), 3)})
    assert report.passed and report.skipped == ("key", "keys")
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Dropout(0.5))
    jax_impl.random.manual_seed(1)
    report = compare(theirs, jnn.Sequential(jnn.Linear(3, 2), jnn.Dropout(0.5)))
    assert report.passed and report.skipped == () and "skipped" not in report.summary()
