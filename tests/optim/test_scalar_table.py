"""The tabulated host scalars of ``_base.torch_optimizer`` under ``jax.jit``.

With constant hyperparameters the jitted step reads torch's float64 host
scalars (bias corrections, ASGD's eta, NAdam's mu_product) from a table built
when the step is traced, instead of calling back into Python every step. The
eager step runs the host maths directly, so jit and eager must agree bit for
bit wherever the table is read, past its end (the callback), and when the
float32 scalar state is not the one the table expects (the callback).
The trajectory tests (``test_<name>.py``) hold both paths against torch.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax_impl.optim import _base
from tests._tiers import slow_except
from tests.optim import _harness as H

# Every optimizer whose host scalars change with the step.
STEP_DEPENDENT = {
    "adam": H.REPRESENTATIVE["adam"],
    "adamw": H.REPRESENTATIVE["adamw"],
    "adamax": H.REPRESENTATIVE["adamax"],
    "nadam": H.REPRESENTATIVE["nadam"],
    "radam": H.REPRESENTATIVE["radam"],
    "asgd": H.REPRESENTATIVE["asgd"],
    "adagrad": H.REPRESENTATIVE["adagrad"],
}


def _jit_and_eager(name, kwargs, dtype, steps, perturb=None):
    """Steps jit and eager side by side from the same start; ``perturb(state)`` after step 5."""
    arrays = H.make_problem(H.Problem(seed=4, shapes=H.LONG_SHAPES, steps=steps), dtype)
    with H.numerics(dtype):
        tx = H.build(name, kwargs)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        jit_p, jit_s = eager_p, eager_s = params, tx.init(params)
        step = jax.jit(tx.step)
        for i, grads in enumerate(arrays.grads):
            if i == 5 and perturb is not None:
                jit_s = eager_s = perturb(jit_s)
            jit_p, jit_s = step(grads, jit_s, jit_p)
            eager_p, eager_s = tx.step(grads, eager_s, eager_p)
        return H.to_numpy((jit_p, jit_s)), H.to_numpy((eager_p, eager_s))


def _assert_bitwise(a, b):
    flat = lambda tree: {str(i): x for i, x in enumerate(jax.tree.leaves(tree))}  # noqa: E731
    assert H.bitwise_equal(flat(a), flat(b))


# float64 in the slow tier (the default tier's time budget): the table's hand-over is the same code in both dtypes.
@pytest.mark.parametrize("dtype", slow_except(H.DTYPES, {"float32"}))
@pytest.mark.parametrize("name", sorted(STEP_DEPENDENT))
def test_table_then_callback_past_its_end(name, dtype, monkeypatch):
    """A 7-step table: steps 1-7 from the table, 8-20 through the callback (or the
    converged last row, for betas that converge at once)."""
    monkeypatch.setattr(_base, "_TABLE_STEPS", 7)
    jit_out, eager_out = _jit_and_eager(name, STEP_DEPENDENT[name], dtype, steps=20)
    _assert_bitwise(jit_out, eager_out)


def test_betas_zero_converge_at_the_first_row(monkeypatch):
    monkeypatch.setattr(_base, "_TABLE_STEPS", 3)
    jit_out, eager_out = _jit_and_eager("adam", dict(lr=1e-2, betas=(0.0, 0.0)), "float32", steps=12)
    _assert_bitwise(jit_out, eager_out)


@pytest.mark.parametrize(("name", "field", "factor"), [("asgd", "eta", 0.5), ("asgd", "mu", 0.25), ("nadam", "mu_product", 0.5)])
def test_foreign_scalar_state_takes_the_callback(name, field, factor):
    """A scalar state the table did not predict (a checkpoint from another run): exact all the same."""
    def perturb(state):
        return state._replace(**{field: getattr(state, field) * np.float32(factor)})

    jit_out, eager_out = _jit_and_eager(name, STEP_DEPENDENT[name], "float32", steps=12, perturb=perturb)
    _assert_bitwise(jit_out, eager_out)


# Counts around the ends of the tables (default betas converge at ~16.6k counts in
# float32), past them, and near int32's end.
COUNTS = [0, 64, 16_700, 20_000, 32_768, 100_000, 2**31 - 2]


@H.examples(8)
@given(
    name=st.sampled_from(["adam", "adamax", "nadam", "radam"]),
    kwargs=H.adam_family_kwargs(),
    momentum_decay=H.log_uniform(1e-3, 1.0),
    dtype=st.sampled_from(H.DTYPES),
)
def test_converged_row_serves_every_later_step(name, kwargs, momentum_decay, dtype):
    """The converging optimizers' tables stop where the scalars reach their limit; one
    step from counts far past that end agrees with the host maths (eager) bit for bit."""
    if name == "nadam":
        kwargs = {**kwargs, "momentum_decay": momentum_decay}
    arrays = H.make_problem(H.Problem(seed=5, shapes=H.LONG_SHAPES, steps=1), dtype)
    with H.numerics(dtype):
        tx = H.build(name, kwargs)
        params = {k: jnp.asarray(v) for k, v in arrays.params.items()}
        step = jax.jit(tx.step)
        for count in COUNTS:
            state = tx.init(params)._replace(count=jnp.asarray(count, jnp.int32))
            if name == "nadam" and count > 1000:
                state = state._replace(mu_product=jnp.zeros((), jnp.float32))  # underflowed by then
            jit_out = step(arrays.grads[0], state, params)
            eager_out = tx.step(arrays.grads[0], state, params)
            _assert_bitwise(H.to_numpy(jit_out), H.to_numpy(eager_out))


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_lr_scheduler_schedule_table_then_callback(name, monkeypatch):
    """torch's schedulers (optim.lr_scheduler) are tabulated too; past a 7-step table, the callback."""
    from jax_impl.optim import lr_scheduler

    monkeypatch.setattr(_base, "_OPEN_TABLE_STEPS", 7)
    kwargs = {**STEP_DEPENDENT.get(name, {"lr": 0.1, "momentum": 0.9}),
              "lr": lr_scheduler.cosine_annealing_lr(0.05, T_max=9)}
    jit_out, eager_out = _jit_and_eager(name, kwargs, "float32", steps=20)
    _assert_bitwise(jit_out, eager_out)


def test_one_cycle_past_total_steps_still_raises():
    """The table ends where torch's scheduler raises; stepping on reaches the callback, which raises."""
    from jax_impl.optim import lr_scheduler, sgd

    tx = sgd(lr=lr_scheduler.one_cycle_lr(0.01, 0.1, total_steps=3), momentum=0.9)
    params = {"w": jnp.ones(3)}
    state, step = tx.init(params), jax.jit(tx.step)
    for _ in range(4):  # counts 0..3: torch's OneCycleLR allows total_steps + 1 lr values
        params, state = step(params, state, params)
    with pytest.raises(Exception, match="total steps"):
        jax.block_until_ready(step(params, state, params))
