"""jax_impl._barrier: the values pass through unchanged under every transformation, and on XLA:CPU every
user of a barrier's results runs after all of them are computed (one custom call they all pass).
``after_all`` orders without copying: no operand of its call is copied first."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl._barrier import after_all, barrier


def _tree():
    rng = np.random.default_rng(0)
    return {"w": jnp.asarray(rng.standard_normal((3, 4), dtype=np.float32)),
            "b": jnp.asarray(rng.standard_normal((3, 2), dtype=np.float32)), "none": None}


def test_values_pass_through_jit_vmap_grad_and_jvp():
    tree = _tree()
    for fn in (barrier, jax.jit(barrier), jax.vmap(barrier), jax.jit(jax.vmap(barrier))):
        out = fn(tree)
        assert out["none"] is None
        for key in ("w", "b"):
            np.testing.assert_array_equal(np.asarray(out[key]), np.asarray(tree[key]))
    loss = lambda t: jnp.sum(barrier(t)["w"] ** 2) + jnp.sum(barrier(t)["b"])  # noqa: E731
    grads = jax.jit(jax.grad(loss))(tree)
    np.testing.assert_array_equal(np.asarray(grads["w"]), 2 * np.asarray(tree["w"]))
    np.testing.assert_array_equal(np.asarray(grads["b"]), np.ones((3, 2), np.float32))
    primal, tangent = jax.jvp(lambda a: barrier([a])[0] * 3, (tree["w"],), (jnp.ones((3, 4)),))
    np.testing.assert_array_equal(np.asarray(tangent), np.full((3, 4), 3, np.float32))
    assert barrier({}) == {}


def test_after_all_passes_every_bit_through_jit_vmap_grad_and_jvp():
    """NaNs and signed zeros included: the select keeps the array itself, never its zero branch."""
    tree = {"w": jnp.array([1.5, -0.0, np.nan, -3.0, np.inf], jnp.float32), "i": jnp.arange(5), "none": None}
    for fn in (after_all, jax.jit(after_all), jax.vmap(after_all), jax.jit(jax.vmap(after_all))):
        out = fn(tree)
        assert out["none"] is None
        np.testing.assert_array_equal(np.asarray(out["w"]).view(np.uint32), np.asarray(tree["w"]).view(np.uint32))
        np.testing.assert_array_equal(np.asarray(out["i"]), np.arange(5))
    w = jnp.array([1.0, -2.0, 0.5], jnp.float32)
    grads = jax.jit(jax.grad(lambda t: jnp.sum(after_all(t)["w"] ** 2)))({"w": w})
    np.testing.assert_array_equal(np.asarray(grads["w"]), 2 * np.asarray(w))
    _, tangent = jax.jvp(lambda a: after_all([a])[0] * 3, (w,), (jnp.ones(3),))
    np.testing.assert_array_equal(np.asarray(tangent), np.full(3, 3, np.float32))
    np.testing.assert_array_equal(np.asarray(jax.hessian(lambda a: jnp.sum(after_all([a])[0] ** 3))(w)),
                                  np.diag(6 * np.asarray(w)))
    assert after_all({}) == {}
    no_values = np.zeros(3, jax.dtypes.float0)  # an integer parameter's tangent
    assert after_all({"t": no_values})["t"] is no_values
    out = jax.jit(after_all)({"w": w, "t": no_values})
    assert out["t"].dtype == jax.dtypes.float0
    np.testing.assert_array_equal(np.asarray(out["w"]), np.asarray(w))


def _array_copies(fn, *args) -> list[str]:
    """The compiled program's copies of non-scalar arrays (a bare ``copy`` or a fusion named for one)."""
    entry = fn.lower(*args).compile().as_text().split("ENTRY")[1]
    return [line.strip() for line in entry.splitlines()
            if "copy" in line.split("=")[0] and not line.split("=")[1].strip().startswith(("s32[]", "f32[]"))]


def test_after_all_copies_nothing_where_the_aliasing_barrier_copies():
    """A reshaped dot result (a GEMM-routed conv's weight gradient) passed through :func:`barrier` is copied
    into the call's own buffer first; through :func:`after_all` the call aliases only its scalar and the
    array is read where the dot wrote it."""
    a = jnp.ones((32, 32), jnp.float32)
    through = {f: jax.jit(lambda m, f=f: f([(m @ m).reshape(8, 8, 4, 4)])[0] * 2) for f in (barrier, after_all)}
    assert _array_copies(through[barrier], a)
    assert not _array_copies(through[after_all], a)
    compiled = through[after_all].lower(a).compile().as_text()
    calls = [line for line in compiled.splitlines() if "custom_call_target=\"jax_impl_barrier\"" in line]
    assert len(calls) == 1
    assert "output_to_operand_aliasing={{}: (0, {})}" in calls[0]
    np.testing.assert_array_equal(np.asarray(through[after_all](a)), np.full((8, 8, 4, 4), 64.0, np.float32))


def test_one_custom_call_aliases_its_operands_on_the_cpu():
    """Every result is its operand's buffer (no copy), and the optimized program still has the call:
    XLA:CPU removes ``lax.optimization_barrier`` before it schedules, which is why this is a custom call."""
    fn = jax.jit(lambda t: jax.tree.map(lambda a: a * 2, barrier(t)))
    compiled = fn.lower(_tree()).compile().as_text()
    calls = [line for line in compiled.splitlines() if "custom_call_target=\"jax_impl_barrier\"" in line]
    assert len(calls) == 1
    assert "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})}" in calls[0]


def test_train_step_updates_after_the_barrier():
    """``jax_impl.train``'s step passes the gradients through one :func:`after_all` before the optimizer."""
    from flax import nnx

    from jax_impl import nn, optim
    from jax_impl.train import init_train_state, train_step

    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    tx = optim.sgd(lr=0.1, momentum=0.9)
    graphdef, state = init_train_state(model, tx)
    step = train_step(graphdef, nn.CrossEntropyLoss(), tx)
    x, y = jnp.ones((5, 4)), jnp.zeros(5, jnp.int32)
    assert step.lower(state, x, y).as_text().count("@jax_impl_barrier") == 1
    calls = [line for line in step.lower(state, x, y).compile().as_text().splitlines()
             if "custom_call_target=\"jax_impl_barrier\"" in line]
    assert len(calls) == 1 and "jax_impl_after_all" in calls[0]
    del nnx


def test_a_process_exits_cleanly_with_steps_still_running():
    """A script that leaves its last steps running when it ends (nothing blocks on them) exits with 0: the
    Python handlers XLA calls (the barrier, oneDNN's convs) are waited for before the interpreter shuts
    down, when they could no longer take the GIL (the process aborted)."""
    import os
    import subprocess
    import sys

    code = ("import jax, jax.numpy as jnp\n"
            "from jax_impl._barrier import barrier\n"
            "f = jax.jit(lambda a: jax.tree.map(lambda v: v * 1.0001 + 1, barrier([a]))[0], donate_argnums=0)\n"
            "a = jnp.ones((256, 256))\n"
            "for _ in range(3000):\n"
            "    a = f(a)\n")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ)
        assert out.returncode == 0, out.stderr[-2000:]
