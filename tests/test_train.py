"""jax_impl.train: the train and eval steps against torch's loop (model.train(), zero_grad, backward, step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn
from jax_impl import optim
from jax_impl.train import eval_step, init_train_state, merge_model, train_step
from parity.build import cast_jax_model
from parity.convert import load_torch_state_dict, to_torch_state_dict


def _models():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 10)).double()
    ours = jnn.Sequential(jnn.Conv2d(1, 4, 3, padding=1), jnn.BatchNorm2d(4), jnn.ReLU(), jnn.Flatten(),
                          jnn.Linear(4 * 8 * 8, 10))
    return ref, ours


def _float64_sgd():
    """``(torch model, its SGD, tx, graphdef, state)``: both sides in float64 from the same weights, SGD with
    momentum (call inside ``jax.enable_x64``). SGD, not Adam: Adam would turn the conv bias's gradient (a
    cancellation residue: BatchNorm follows) into lr-sized steps, far above float64's rounding."""
    ref, ours = _models()
    cast_jax_model(ours, np.float64)
    load_torch_state_dict(ours, {k: v.numpy() for k, v in ref.state_dict().items()})
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    tx = optim.sgd(lr=0.1, momentum=0.9)
    graphdef, state = init_train_state(ours, tx)
    return ref, opt, tx, graphdef, state


@pytest.mark.parametrize("donate", [True, False])
def test_train_step_follows_torchs_loop_in_float64(donate):
    """SGD with momentum, BatchNorm in train mode, 5 steps: parameters and running statistics within 1e-12
    (float64: only the conv/matmul summation orders differ; measured ~1e-15)."""
    with jax.enable_x64(True):
        ref, opt, tx, graphdef, state = _float64_sgd()
        step = train_step(graphdef, jnn.CrossEntropyLoss(), tx, donate=donate)
        rng = np.random.default_rng(0)
        ref.train()
        for _ in range(5):
            x, y = rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 10, 8)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            opt.step()
            state, j_loss = step(state, jnp.asarray(x), jnp.asarray(y))
            assert abs(float(j_loss) - loss.item()) <= 1e-12 * abs(loss.item())
        got = {k: v.numpy() for k, v in to_torch_state_dict(merge_model(graphdef, state)).items()}
        for key, want in ref.state_dict().items():
            np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-12, atol=1e-14, err_msg=key)
        ref.eval()
        x = rng.standard_normal((4, 1, 8, 8))
        with torch.no_grad():
            want = ref(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(eval_step(graphdef)(state, jnp.asarray(x)), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("form", ["pure dict", "nnx.State"])
def test_train_step_returns_the_state_in_the_form_given(form):
    """init_train_state's pure dicts and a state split by nnx.split (nnx.State of variables) both follow
    torch's loop (float64, within 1e-12 as above), come back in the form given, and trace the step once."""
    from flax import nnx

    from jax_impl.train import TrainState

    with jax.enable_x64(True):
        ref, opt, tx, graphdef, state = _float64_sgd()
        assert isinstance(state.params, dict) and not isinstance(state.params, nnx.State)
        if form == "nnx.State":
            graphdef, params, buffers = nnx.split(merge_model(graphdef, state), nnx.Param, ...)
            state = TrainState(params, buffers, tx.init(params))
        traces = []

        def loss_fn(out, y):
            traces.append(1)
            return jnn.CrossEntropyLoss()(out, y)

        step = train_step(graphdef, loss_fn, tx)
        tree = jax.tree.structure(state)
        rng = np.random.default_rng(1)
        ref.train()
        for _ in range(3):
            x, y = rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 10, 8)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            opt.step()
            state, _ = step(state, jnp.asarray(x), jnp.asarray(y))
            assert jax.tree.structure(state) == tree
        assert len(traces) == 1
        got = {k: v.numpy() for k, v in to_torch_state_dict(merge_model(graphdef, state)).items()}
        for key, want in ref.state_dict().items():
            np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-12, atol=1e-14, err_msg=key)


def _torch_step(ref, opt, batches, k, max_norm):
    """torch's recipe: zero_grad, (loss / k).backward() per micro-batch, clip_grad_norm_, step."""
    opt.zero_grad()
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
        (loss / k if k > 1 else loss).backward()
        losses.append(loss.item())
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    opt.step()
    return losses


@pytest.mark.parametrize(("accumulate", "max_norm"), [
    pytest.param(1, 0.1, marks=pytest.mark.slow), pytest.param(3, None, marks=pytest.mark.slow), (3, 0.1)])
def test_clip_and_accumulation_follow_torchs_recipe_in_float64(accumulate, max_norm):
    """train_step(clip_grad_norm=...) and accumulating_train_step (3 micro-batches, then a trailing step of 2,
    still divided by 3) with BatchNorm updating its statistics per micro-batch: 4 optimizer steps of SGD,
    parameters and running statistics within 1e-12 (float64; measured 5.6e-16 scaled by each tensor's max).
    max_norm 0.1 is below every step's total norm, so the clip scales each step."""
    from jax_impl.train import accumulating_train_step

    with jax.enable_x64(True):
        ref, opt, tx, graphdef, state = _float64_sgd()
        if accumulate == 1:
            plain = train_step(graphdef, jnn.CrossEntropyLoss(), tx, clip_grad_norm=max_norm)
            step = lambda s, batches: (lambda out: (out[0], [out[1]]))(plain(s, *batches[0]))  # noqa: E731
        else:
            step = accumulating_train_step(graphdef, jnn.CrossEntropyLoss(), tx, accumulate, clip_grad_norm=max_norm)
        rng = np.random.default_rng(0)
        ref.train()
        for size in (accumulate, accumulate, accumulate, max(accumulate - 1, 1)):
            batches = [(rng.standard_normal((6, 1, 8, 8)), rng.integers(0, 10, 6)) for _ in range(size)]
            want = _torch_step(ref, opt, batches, accumulate, max_norm)
            state, got = step(state, [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches])
            np.testing.assert_allclose([float(g) for g in got], want, rtol=1e-12)
        got = {k: v.numpy() for k, v in to_torch_state_dict(merge_model(graphdef, state)).items()}
        for key, want in ref.state_dict().items():
            np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-12, atol=1e-14, err_msg=key)


def test_accumulating_train_step_rejects_bad_counts():
    from jax_impl.train import accumulating_train_step

    ref, ours = _models()
    tx = optim.sgd(lr=0.1)
    graphdef, state = init_train_state(ours, tx)
    with pytest.raises(ValueError, match="positive integer"):
        accumulating_train_step(graphdef, jnn.CrossEntropyLoss(), tx, 0)
    step = accumulating_train_step(graphdef, jnn.CrossEntropyLoss(), tx, 2)
    x, y = jnp.zeros((2, 1, 8, 8)), jnp.zeros(2, jnp.int32)
    with pytest.raises(ValueError, match="1 to 2 micro-batches"):
        step(state, [(x, y)] * 3)
