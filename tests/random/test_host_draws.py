"""jit_with_host_draws: a jitted step's dropout masks drawn on the host before each call, in torch's order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_impl.nn as jnn
import jax_impl.nn.functional as JF
from jax_impl import optim
from jax_impl.random import default_generator, manual_seed
from jax_impl.random.host_draws import jit_with_host_draws
from jax_impl.train import accumulating_train_step, init_train_state, merge_model, train_step
from parity.build import cast_jax_model
from parity.convert import load_torch_state_dict, to_torch_state_dict


def _pair():
    """A torch model with two dropout layers (of different shapes and p) and its jax_impl twin, in float64."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                              torch.nn.Linear(16, 8), torch.nn.Dropout(0.6), torch.nn.Linear(8, 3)).double()
    ours = jnn.Sequential(jnn.Linear(6, 16), jnn.ReLU(), jnn.Dropout(0.3), jnn.Linear(16, 8), jnn.Dropout(0.6),
                          jnn.Linear(8, 3))
    cast_jax_model(ours, np.float64)
    load_torch_state_dict(ours, {k: v.numpy() for k, v in ref.state_dict().items()})
    return ref, ours


_SEEDED_SIZES = np.random.default_rng(1).integers(1, 9, 6).tolist() + [3, 3]


@pytest.mark.parametrize(("accumulate", "sizes"), [
    (1, [4, 3, 4]), (2, [4, 3, 4]),
    pytest.param(1, _SEEDED_SIZES, marks=pytest.mark.slow), pytest.param(2, _SEEDED_SIZES, marks=pytest.mark.slow)])
def test_train_steps_draw_torchs_masks_between_host_draws(accumulate, sizes):
    """Batch sizes that change (each new size makes a new plan; a size seen before reuses its own), with a
    host draw between steps (a sampler's ``randperm`` at an epoch's start): parameters within 1e-12 of
    torch's (float64; only the matmul summation orders differ) and the generator where torch's is, draw for
    draw. The slow tier runs a seeded grid of sizes."""
    with jax.enable_x64(True):
        ref, ours = _pair()
        opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        tx = optim.sgd(lr=0.1, momentum=0.9)
        graphdef, state = init_train_state(ours, tx)
        if accumulate == 1:
            single = train_step(graphdef, jnn.CrossEntropyLoss(), tx)
            step = lambda s, batches: single(s, *batches[0])  # noqa: E731
        else:
            step = accumulating_train_step(graphdef, jnn.CrossEntropyLoss(), tx, accumulate)
        rng = np.random.default_rng(1)
        torch.manual_seed(7)
        manual_seed(7)
        ref.train()
        for size in sizes:
            np.testing.assert_array_equal(default_generator.randperm(5), torch.randperm(5).numpy())
            batches = [(rng.standard_normal((size, 6)), rng.integers(0, 3, size)) for _ in range(accumulate)]
            opt.zero_grad()
            for x, y in batches:
                loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
                (loss / accumulate).backward()
            opt.step()
            state, _ = step(state, [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches])
        np.testing.assert_array_equal(default_generator.get_state(), torch.get_rng_state().numpy())
        got = {k: v.numpy() for k, v in to_torch_state_dict(merge_model(graphdef, state)).items()}
        for key, want in ref.state_dict().items():
            np.testing.assert_allclose(got[key], want.numpy(), rtol=1e-12, atol=1e-14, err_msg=key)


def test_a_function_without_draws_is_plain_jit_and_draws_nothing():
    manual_seed(3)
    before = default_generator.get_state()
    f = jit_with_host_draws(lambda x: JF.relu(x) * 2, key_argnums=(0,))
    np.testing.assert_array_equal(f(jnp.asarray([-1.0, 2.0])), [0.0, 4.0])
    np.testing.assert_array_equal(default_generator.get_state(), before)


def test_draws_that_depend_on_more_than_the_key_raise():
    """The plan is found per shape of the key arguments: a draw whose shape follows another argument is refused
    with a one-line error rather than fed a mask of the wrong shape."""
    f = jit_with_host_draws(lambda n, x: JF.dropout(jnp.ones(n.shape), 0.5) + x.sum(), key_argnums=(1,))
    f(jnp.ones(3), jnp.ones(2))
    with pytest.raises(RuntimeError, match="not the one recorded"):
        f(jnp.ones(4), jnp.ones(2))


def test_lower_draws_nothing_and_compiles_the_masked_step():
    """``step.lower(...)`` (jax.jit's AOT entry, used for memory analysis) takes the masks as abstract
    arguments: the generator does not move, and the lowered program holds no host callback."""
    manual_seed(5)
    before = default_generator.get_state()
    f = jit_with_host_draws(lambda x: JF.dropout(x, 0.5) * 2, key_argnums=(0,))
    lowered = f.lower(jnp.ones((4, 3)))
    assert "callback" not in lowered.as_text()
    assert lowered.compile().memory_analysis() is not None
    np.testing.assert_array_equal(default_generator.get_state(), before)


def test_fewer_draws_than_recorded_raise():
    """A draw the host made but the compiled function would not use would move the stream past torch's."""
    f = jit_with_host_draws(lambda n, x: JF.dropout(x, 0.5) if n.shape[0] == 3 else x, key_argnums=(1,))
    f(jnp.ones(3), jnp.ones(2))
    with pytest.raises(RuntimeError, match="fewer traced draws"):
        f(jnp.ones(4), jnp.ones(2))


def test_inside_another_jit_the_draws_stay_callbacks_of_that_program():
    """A step called inside an outer ``jax.jit`` draws when the outer program runs, call after call."""
    torch.manual_seed(6)
    manual_seed(6)
    step = jit_with_host_draws(lambda v: JF.dropout(v, 0.5), key_argnums=(0,))
    outer = jax.jit(lambda v: step(v) * 3)
    x = np.ones((2, 5), np.float32)
    for _ in range(2):
        want = torch.nn.functional.dropout(torch.from_numpy(x), 0.5).numpy() * 3
        np.testing.assert_array_equal(np.asarray(outer(jnp.asarray(x))), want)
