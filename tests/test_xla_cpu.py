"""jax_impl switches XLA:CPU's YNNPACK convolutions off at import (see jax_impl/_xla_cpu.py)."""

import os
import subprocess
import sys

import pytest

from jax_impl._xla_cpu import COPY_FLAG, YNN_FLAG, _jaxlib_knows_flag, jaxlib_knows_flag


def _run(code: str, env_flags: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if env_flags is not None:
        env["XLA_FLAGS"] = env_flags
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(not _jaxlib_knows_flag(), reason="this jaxlib has no YNNPACK fusion flag")
def test_import_sets_flag_before_backend_start():
    r = _run("import jax_impl, os; import jax; jax.numpy.ones(1).block_until_ready(); print(os.environ['XLA_FLAGS'])")
    assert r.returncode == 0, r.stderr
    assert YNN_FLAG in r.stdout
    assert COPY_FLAG in r.stdout or not jaxlib_knows_flag(COPY_FLAG[2:].split("=")[0])


@pytest.mark.skipif(not _jaxlib_knows_flag(), reason="this jaxlib has no YNNPACK fusion flag")
def test_user_choice_is_kept_and_late_import_warns():
    r = _run("import jax_impl, os; print(os.environ['XLA_FLAGS'])",
             env_flags="--xla_cpu_experimental_ynn_fusion_type=individual_convolution")
    assert r.returncode == 0 and YNN_FLAG not in r.stdout
    r = _run("import jax; jax.numpy.ones(1).block_until_ready(); import jax_impl")
    assert r.returncode == 0 and "YNNPACK convolutions stay on" in r.stderr


@pytest.mark.skipif(not jaxlib_knows_flag(COPY_FLAG[2:].split("=")[0]), reason="this jaxlib has no such flag")
def test_a_donated_parameter_read_by_the_backward_is_not_copied():
    """SGD with momentum on a Linear: the backward reads the weight (the input gradient) and the update
    overwrites it in place; the compiled step holds no copy of it."""
    code = """
import jax_impl, jax.numpy as jnp, re
import jax_impl.nn as nn
from jax_impl import optim
from jax_impl.train import init_train_state, train_step
model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
tx = optim.sgd(lr=0.1, momentum=0.9)
graphdef, state = init_train_state(model, tx)
step = train_step(graphdef, nn.CrossEntropyLoss(), tx)
text = step.lower(state, jnp.ones((8, 64)), jnp.zeros(8, jnp.int32)).compile().as_text()
print(len(re.findall(r"= f32\\[[0-9,]+\\][^ ]* copy\\(", text)))
"""
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "0"
    r = _run(code, env_flags=COPY_FLAG.replace("true", "false"))  # the user's choice stands, and copies
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) > 0
