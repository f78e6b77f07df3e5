"""``jax_impl.nn.functional.ctc_loss`` / ``nn.CTCLoss`` against torch's CPU ``ctc_loss``, value and gradient.

The gradient compared is that of ``sum(loss * cos weights)`` w.r.t.
``log_probs``: torch's hand-written backward kernel on one side, its
reproduction (a ``jax.custom_vjp``) on the other. Error measure:
``max|jax - torch| / max|torch|`` over the finite entries, with infinite and
NaN entries required at the same places.

Measured over the seeded grids below (torch 2.13 CPU, jax 0.10.2 XLA:CPU):
float64 losses within 4e-16 and gradients within 4.3e-15 (1 ULP differences
of ``exp``/``log`` between glibc and XLA, carried through the recursions);
float32 losses within 4e-7 and gradients within 4e-7 (the same, at float32's
ULP). Bounds: ``F64 = 1e-12`` (the brief's float64 bound), ``F32 = 2e-6``
(5x the worst float32 value seen: longer sequences add more rounded steps).
"""

from __future__ import annotations

import itertools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from jax_impl.nn import functional as F
from jax_impl.nn.modules import loss as L

F64 = 1e-12
F32 = 2e-6
# Fixed sizes, so the compiled recursions are reused across a grid.
T, N, C, S = 10, 3, 5, 4


def _err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN positions differ"
    assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.array_equal(
        np.isneginf(got), np.isneginf(want)
    ), "infinite entries differ"
    finite = np.isfinite(want)
    scale = max(float(np.max(np.abs(want[finite]), initial=0.0)), 1e-300)
    return float(np.max(np.abs(got[finite] - want[finite]), initial=0.0)) / scale


def _case(seed: int, dtype, blank: int, impossible: bool):
    """Log-probabilities, padded targets (labels != blank) and lengths; the first target has length S."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, N, C))
    log_probs = torch.tensor(x, dtype=dtype).log_softmax(2).numpy()
    labels = rng.integers(0, C - 1, (N, S))
    targets = np.where(labels >= blank, labels + 1, labels)
    target_lengths = rng.integers(0, S + 1, N)
    target_lengths[0] = S  # keeps the concatenated form's padded width fixed
    input_lengths = rng.integers(1, T + 1, N)
    input_lengths[1] = T
    if impossible:
        # A target "a a" needs 3 frames; one frame cannot hold S labels.
        targets[2, :2] = targets[2, 0]
        target_lengths[2] = 2
        input_lengths[2] = 2
        input_lengths[0] = 1
    return log_probs, targets, input_lengths, target_lengths


def _compare(seed, dtype, reduction, zero_infinity, concatenated, blank, impossible, unbatched=False):
    log_probs, targets, input_lengths, target_lengths = _case(seed, dtype, blank, impossible)
    if concatenated:
        targets = np.concatenate([targets[i, : target_lengths[i]] for i in range(N)])
    if unbatched:
        log_probs = log_probs[:, 0]
        targets = targets[0] if not concatenated else targets[: target_lengths[0]]
        input_lengths, target_lengths = input_lengths[0], target_lengths[0]
    lp = torch.tensor(log_probs, requires_grad=True)
    out = TF.ctc_loss(
        lp, torch.tensor(targets), torch.tensor(input_lengths), torch.tensor(target_lengths), blank, reduction,
        zero_infinity,
    )
    weights = np.cos(np.arange(out.numel())).reshape(tuple(out.shape)).astype(log_probs.dtype)
    torch.where(torch.isnan(out), 0, out * torch.tensor(weights)).sum().backward()

    def loss(a):
        value = F.ctc_loss(a, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
        return jnp.sum(jnp.where(jnp.isnan(value), 0, value * weights)), value

    with jax.enable_x64(dtype == torch.float64):
        grad, value = jax.grad(loss, has_aux=True)(jnp.asarray(log_probs))
        assert value.dtype == log_probs.dtype and value.shape == tuple(out.shape)
        return _err(value, out.detach().numpy()), _err(grad, lp.grad.numpy())


GRID = list(itertools.product(
    [torch.float64, torch.float32], ["none", "mean", "sum"], [False, True], [False, True], [0, 2, C - 1], [False, True]
))
# The default tier: every option at least once, on two compilations (float64 'none' and 'mean'); float32 and
# 'sum' in the slow tier.
FAST = [
    (torch.float64, "none", False, False, 0, False),
    (torch.float64, "none", True, True, 2, True),
    (torch.float64, "none", False, True, C - 1, True),
    (torch.float64, "mean", True, False, C - 1, True),
    (torch.float64, "mean", False, True, 0, False),
]


# The slow tier: a seeded quarter of the rest of the grid (36 of 139 compilations; every option value occurs
# in it many times), to keep CI's slow tier in its budget.
SLOW = random.Random(0).sample([case for case in GRID if case not in FAST], 36)


@pytest.mark.parametrize(
    "dtype,reduction,zero_infinity,concatenated,blank,impossible",
    FAST + [pytest.param(*case, marks=pytest.mark.slow) for case in SLOW],
)
def test_ctc_loss_matches_torch(dtype, reduction, zero_infinity, concatenated, blank, impossible):
    bound = F64 if dtype == torch.float64 else F32
    for seed in range(2):
        value_err, grad_err = _compare(seed, dtype, reduction, zero_infinity, concatenated, blank, impossible)
        assert value_err <= bound, value_err
        assert grad_err <= bound, grad_err


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ctc_loss_seeded_grid(dtype):
    bound = F64 if dtype == torch.float64 else F32
    worst = [0.0, 0.0]
    for seed in range(12):
        rng = np.random.default_rng(100 + seed)
        reduction = ["none", "mean", "sum"][seed % 3]
        errs = _compare(
            100 + seed, dtype, reduction, bool(rng.integers(2)), bool(rng.integers(2)), int(rng.integers(C)),
            bool(rng.integers(2)),
        )
        worst = [max(w, e) for w, e in zip(worst, errs)]
    assert max(worst) <= bound, worst


@pytest.mark.parametrize(
    "reduction,concatenated", [pytest.param(*c, marks=pytest.mark.slow) for c in
                               [("none", True), ("none", False), ("mean", False), ("mean", True)]]
)
def test_ctc_loss_unbatched(reduction, concatenated):
    value_err, grad_err = _compare(3, torch.float64, reduction, False, concatenated, 0, False, unbatched=True)
    assert value_err <= F64 and grad_err <= F64


def test_ctc_loss_repeated_labels_and_empty_targets():
    """Repeats need a blank between them (no skip transition); an empty target is all blanks."""
    log_probs, _, _, _ = _case(5, torch.float64, 0, False)
    targets = np.array([[2, 2, 3, 3], [1, 1, 1, 1], [4, 0, 0, 0]])
    for input_lengths, target_lengths in [([T, T, T], [4, 4, 0]), ([4, T, 1], [2, 4, 0]), ([0, T, 0], [0, 3, 1])]:
        lp = torch.tensor(log_probs, requires_grad=True)
        out = TF.ctc_loss(lp, torch.tensor(targets), torch.tensor(input_lengths), torch.tensor(target_lengths),
                          reduction="none", zero_infinity=True)
        out.sum().backward()
        with jax.enable_x64(True):
            value, grad = jax.value_and_grad(
                lambda a: jnp.sum(F.ctc_loss(a, targets, input_lengths, target_lengths, reduction="none",
                                             zero_infinity=True))
            )(jnp.asarray(log_probs))
            mine = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction="none", zero_infinity=True)
        assert _err(mine, out.detach().numpy()) <= F64
        # torch's -0.0 for an empty target on an empty input
        np.testing.assert_array_equal(np.signbit(np.asarray(mine)), np.signbit(out.detach().numpy()))
        assert _err(grad, lp.grad.numpy()) <= F64


def test_ctc_loss_under_jit_with_traced_lengths():
    log_probs, targets, input_lengths, target_lengths = _case(8, torch.float64, 0, False)
    want = TF.ctc_loss(torch.tensor(log_probs), torch.tensor(targets), torch.tensor(input_lengths),
                       torch.tensor(target_lengths), reduction="mean").numpy()
    with jax.enable_x64(True):
        got = jax.jit(lambda a, t, il, tl: F.ctc_loss(a, t, il, tl))(log_probs, targets, input_lengths, target_lengths)
    assert _err(got, want) <= F64


def test_ctc_loss_module():
    log_probs, targets, input_lengths, target_lengths = _case(9, torch.float64, 1, True)
    for kwargs in [{}, {"blank": 1, "reduction": "none", "zero_infinity": True}]:
        want = torch.nn.CTCLoss(**kwargs)(torch.tensor(log_probs), torch.tensor(targets),
                                          torch.tensor(input_lengths), torch.tensor(target_lengths))
        module = L.CTCLoss(**kwargs)
        assert (module.blank, module.reduction, module.zero_infinity) == (
            kwargs.get("blank", 0), kwargs.get("reduction", "mean"), kwargs.get("zero_infinity", False))
        with jax.enable_x64(True):
            got = module(log_probs, targets, input_lengths, target_lengths)
        assert _err(got, want.numpy()) <= F64


def _bad_calls():
    lp = np.log(np.full((6, 2, 5), 0.2))
    tg = np.array([[1, 2, 3], [2, 2, 0]])
    il, tl = np.array([6, 5]), np.array([3, 2])
    return [
        (lp[:, 0, 0], tg, il, tl, {}),
        (lp[None], tg, il, tl, {}),
        (lp, tg, il, tl, {"blank": 5}),
        (lp, tg, il, tl, {"blank": -1}),
        (lp, tg, np.array([6, 5, 4]), tl, {}),
        (lp, tg, il, np.array([3]), {}),
        (lp, tg, il, np.array([3, -1]), {}),
        (lp, tg, il, np.array([4, 1]), {}),
        (lp, tg[:1], il, tl, {}),
        (lp, tg, np.array([-1, 5]), tl, {}),
        (lp, tg, np.array([7, 5]), tl, {}),
        (lp, tg, il.astype(np.float32), tl, {}),
        (lp, tg, il, tl.astype(np.float32), {}),
        (lp, np.array([1, 2, 3, 2]), il, tl, {}),
        (lp, tg[None], il, tl, {}),
        (lp, tg, il, tl, {"reduction": "bad"}),
        (lp.astype(np.float16), tg, il, tl, {}),
    ]


@pytest.mark.parametrize("case", range(17))
def test_ctc_loss_errors_match_torch(case):
    lp, tg, il, tl, kwargs = _bad_calls()[case]
    with pytest.raises(Exception) as want:
        TF.ctc_loss(torch.tensor(lp), torch.tensor(tg), torch.tensor(il), torch.tensor(tl), **kwargs)
    with pytest.raises(type(want.value)) as got:
        F.ctc_loss(lp, tg, il, tl, **kwargs)
    assert str(got.value) == str(want.value).splitlines()[0]
