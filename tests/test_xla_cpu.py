"""jax_impl switches XLA:CPU's YNNPACK convolutions off at import (see jax_impl/_xla_cpu.py)."""

import os
import subprocess
import sys

import pytest

from jax_impl._xla_cpu import YNN_FLAG, _jaxlib_knows_flag


def _run(code: str, env_flags: str | None = None, **extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if env_flags is not None:
        env["XLA_FLAGS"] = env_flags
    env.update(extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(not _jaxlib_knows_flag(), reason="this jaxlib has no YNNPACK fusion flag")
def test_import_sets_flag_before_backend_start():
    r = _run("import jax_impl, os; import jax; jax.numpy.ones(1).block_until_ready(); print(os.environ['XLA_FLAGS'])")
    assert r.returncode == 0, r.stderr
    assert YNN_FLAG in r.stdout


@pytest.mark.skipif(not _jaxlib_knows_flag(), reason="this jaxlib has no YNNPACK fusion flag")
def test_user_choice_is_kept_and_late_import_warns():
    r = _run("import jax_impl, os; print(os.environ['XLA_FLAGS'])",
             env_flags="--xla_cpu_experimental_ynn_fusion_type=individual_convolution")
    assert r.returncode == 0 and YNN_FLAG not in r.stdout
    r = _run("import jax; jax.numpy.ones(1).block_until_ready(); import jax_impl")
    assert r.returncode == 0 and "YNNPACK convolutions stay on" in r.stderr


def test_opt_out_leaves_xla_flags_untouched():
    """``JAX_IMPL_XLA_FLAGS=0``: importing jax_impl changes nothing in the environment (the README says so)."""
    r = _run("import jax_impl, os; print(repr(os.environ.get('XLA_FLAGS')))", JAX_IMPL_XLA_FLAGS="0")
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stdout + r.stderr
