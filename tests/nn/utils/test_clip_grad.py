"""clip_grad_norm_ / clip_grad_value_ / vector_norm against torch.nn.utils and torch.linalg on float32 gradients.

Bit-identical: per-tensor norms, the total norm and the clipped gradients,
for norm types 2, 1, 0.5, 0 and +-inf, with torch's default threads (sizes
around the 8 lanes, the 4-wide tail blocks and ``GRAIN_SIZE``). Other norm
types go through ``powf``, emulated in float64: measured over these draws
within 1 ULP of torch (glibc's powf is not correctly rounded everywhere).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from jax_impl.nn.utils import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_intra_op_threads,
    get_total_norm,
    vector_norms,
)
from jax_impl.nn.utils.linalg_norm import GRAIN_SIZE

# 0: bit-identical. 3.0: powf (see the module docstring), measured 1 ULP at most.
ULP = {2.0: 0, 1.0: 0, 0.5: 0, 0.0: 0, math.inf: 0, -math.inf: 0, 3.0: 1}


def _default_first(values):
    """The first value runs in the default tier, the rest in the slow tier (the default tier's time budget)."""
    return [v if i == 0 else pytest.param(v, marks=pytest.mark.slow) for i, v in enumerate(values)]


def _draw(rng):
    shapes = [tuple(int(d) for d in rng.integers(1, 30, size=rng.integers(0, 3))) for _ in range(rng.integers(1, 5))]
    return [(rng.standard_normal(s) * 10 ** rng.uniform(-2, 2)).astype(np.float32) for s in shapes]


def _torch_clip(grads, fn, *args, **kwargs):
    params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g)
    total = fn(params, *args, **kwargs)
    return total, [p.grad.numpy() for p in params]


def _ulps(a, b) -> int:
    return abs(int(np.asarray(a, np.float32).view(np.int32)) - int(np.asarray(b, np.float32).view(np.int32)))


@pytest.mark.parametrize("norm_type", _default_first(list(ULP)))
@pytest.mark.parametrize("seed", _default_first(range(8)))
def test_clip_grad_norm_matches_torch(norm_type, seed):
    rng = np.random.default_rng(seed)
    grads = _draw(rng)
    max_norm = float(rng.uniform(0.1, 5))
    t_total, t_grads = _torch_clip(grads, torch.nn.utils.clip_grad_norm_, max_norm, norm_type)
    total, clipped = clip_grad_norm_([jnp.asarray(g) for g in grads], max_norm, norm_type)
    assert _ulps(total, t_total.numpy()) <= ULP[norm_type]
    # With torch's total norm, the clipped gradients are torch's bit for bit.
    same_norm = clip_grads_with_norm_([jnp.asarray(g) for g in grads], max_norm, jnp.asarray(t_total.numpy()))
    for mine, theirs in zip(same_norm, t_grads):
        np.testing.assert_array_equal(np.asarray(mine), theirs)
    if ULP[norm_type] == 0:
        for mine, theirs in zip(clipped, t_grads):
            np.testing.assert_array_equal(np.asarray(mine), theirs)


# Around the 8 lanes and 4-wide tail blocks of the ord=2 kernel, and around GRAIN_SIZE (the thread split).
_SIZES = [*range(1, 41), 63, 64, 65, 1023, 1029, GRAIN_SIZE - 1, GRAIN_SIZE, GRAIN_SIZE + 3, 2 * GRAIN_SIZE + 5, 100003]


@pytest.mark.parametrize(("norm_type", "sizes"), [
    (2.0, _SIZES[:20]),
    *[pytest.param(p, _SIZES, marks=pytest.mark.slow) for p in (2.0, 1.0, 0.5, 0.0, math.inf, -math.inf, 3.0)],
])
def test_vector_norms_match_torch_per_size(norm_type, sizes):
    assert get_intra_op_threads() == torch.get_num_threads()
    rng = np.random.default_rng(7)
    xs = [(rng.standard_normal(n) * 10 ** rng.uniform(-3, 3)).astype(np.float32) for n in sizes]
    mine = vector_norms([jnp.asarray(x) for x in xs], norm_type)
    for x, m in zip(xs, mine):
        theirs = torch.linalg.vector_norm(torch.from_numpy(x), norm_type).numpy()
        assert _ulps(m, theirs) <= ULP[norm_type], (x.size, float(m), float(theirs))


@pytest.mark.slow
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 0.5])
def test_clip_grad_norm_wide_trees_match_torch(norm_type):
    """Many tensors of mixed sizes (the norm of 100+ norms goes through the same kernel), under jax.jit too.

    Eagerly in the 2-norm only: each eager run compiles every op for each of the ~48 sizes (about 4 s of
    CPU), and the other norm types' eager kernels per size are test_vector_norms_match_torch_per_size's.
    """
    rng = np.random.default_rng(11)
    sizes = rng.choice(_SIZES[:48], size=120)
    grads = [(rng.standard_normal(int(n)) * 10 ** rng.uniform(-3, 1)).astype(np.float32) for n in sizes]
    t_total, t_grads = _torch_clip(grads, torch.nn.utils.clip_grad_norm_, 0.5, norm_type)
    jitted = jax.jit(clip_grad_norm_, static_argnums=(1, 2))
    for fn in (clip_grad_norm_, jitted) if norm_type == 2.0 else (jitted,):
        total, clipped = fn([jnp.asarray(g) for g in grads], 0.5, norm_type)
        assert _ulps(total, t_total.numpy()) == 0
        for mine, theirs in zip(clipped, t_grads):
            np.testing.assert_array_equal(np.asarray(mine), theirs)


def test_foreach_paths_agree_in_torch():
    """torch 2.13 on CPU: foreach None / True / False give one total norm (the premise of the single path here)."""
    grads = _draw(np.random.default_rng(3))
    totals = {f: _torch_clip(grads, torch.nn.utils.clip_grad_norm_, 1.0, 2.0, foreach=f)[0].numpy() for f in
              (None, True, False)}
    assert totals[None].view(np.int32) == totals[True].view(np.int32) == totals[False].view(np.int32)
    total, _ = clip_grad_norm_([jnp.asarray(g) for g in grads], 1.0, foreach=True)
    assert _ulps(total, totals[None]) == 0


def test_clip_grad_value_matches_torch():
    grads = _draw(np.random.default_rng(0))
    grads[0].reshape(-1)[0] = np.nan
    _, t_grads = _torch_clip(grads, torch.nn.utils.clip_grad_value_, 0.37)
    for mine, theirs in zip(clip_grad_value_([jnp.asarray(g) for g in grads], 0.37), t_grads):
        np.testing.assert_array_equal(np.asarray(mine), theirs)


def test_nonfinite_norm_raises_like_torch():
    grads = [np.array([1.0, np.inf], np.float32)]
    with pytest.raises(RuntimeError) as theirs:
        _torch_clip(grads, torch.nn.utils.clip_grad_norm_, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as mine:
        clip_grad_norm_([jnp.asarray(grads[0])], 1.0, error_if_nonfinite=True)
    assert str(mine.value) == str(theirs.value)


def test_none_leaves_and_empty_tree():
    total, clipped = clip_grad_norm_({"a": jnp.ones(3), "b": None}, 1.0)
    assert clipped["b"] is None
    assert float(total) == float(torch.linalg.vector_norm(torch.ones(3)))
    assert float(get_total_norm([])) == 0.0


def test_optax_transform_clips_inside_a_chain():
    grads = {"w": jnp.asarray(np.full((4,), 3.0, np.float32))}
    tx = optax.chain(clip_grad_norm(1.0), optax.sgd(1.0))
    updates, _ = tx.update(grads, tx.init(grads))
    _, expected = clip_grad_norm_(grads, 1.0)
    np.testing.assert_array_equal(np.asarray(updates["w"]), -np.asarray(expected["w"]))


def test_norm_loops_compile_as_native_loops():
    """The sequential lane sums of a model-sized gradient tree are loops XLA:CPU compiles whole (its
    small-while-loop hoisting): a loop left to the thunk runtime costs about a microsecond an iteration,
    several milliseconds of a train step. Structure only; the values are checked against torch above."""
    grads = [jnp.zeros((1024, 256), jnp.float32)] * 4 + [jnp.zeros((10000, 256), jnp.float32)] * 2
    compiled = jax.jit(lambda g: get_total_norm(g)).lower(grads).compile().as_text()
    loops, hoisted = compiled.count(" while("), compiled.count('xla_cpu_small_call="true"')
    assert loops >= 3 and hoisted == loops, (loops, hoisted)
