"""``parity run``'s persistent compilation cache: where it lives, how it is turned off, and that a second
run of a config reads its compiled train step back instead of compiling it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import parity.compile_cache as cc
from parity.cli import main


@pytest.fixture(autouse=True)
def _no_jax_cache_of_the_users(monkeypatch):
    """These tests are about parity's own cache, which steps aside for a JAX cache the user set: the test
    session's (tests/conftest.py) is put aside for them, in this process and the ones it starts."""
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    settings = {"jax_compilation_cache_dir": None}  # JAX's default
    for name in settings:
        monkeypatch.delenv(name.upper(), raising=False)
    before = {name: getattr(jax.config, name) for name in settings}
    for name, value in settings.items():
        jax.config.update(name, value)
    jax_cache.reset_cache()
    yield
    for name, value in before.items():
        jax.config.update(name, value)
    jax_cache.reset_cache()


def test_default_location_and_opt_out(monkeypatch, tmp_path):
    monkeypatch.delenv("PARITY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cc.default_cache_dir() == tmp_path / "xdg" / "parity" / "jax"
    monkeypatch.setenv("PARITY_CACHE_DIR", str(tmp_path / "mine"))
    assert cc.default_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("PARITY_CACHE_DIR", "")
    assert cc.default_cache_dir() is None


def test_the_cache_holds_compiles_inside_the_block_only(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    with cc.compilation_cache(tmp_path / "jax") as where:
        assert where == tmp_path / "jax"
        jax.jit(lambda v: jnp.sin(v) * 3.25)(jnp.arange(7.0)).block_until_ready()
    assert any(p.name.startswith("jit__lambda") for p in (tmp_path / "jax").iterdir())
    assert jax.config.jax_compilation_cache_dir == before  # restored for whatever runs next
    with cc.compilation_cache(None) as where:
        assert where is None


def test_an_unwritable_location_runs_without_the_cache(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with cc.compilation_cache(blocked / "jax") as where:
        assert where is None


@pytest.mark.slow  # ~20 s: two short parity runs
def test_a_second_run_reads_its_train_step_back(tmp_path, monkeypatch, capsys):
    """The default config's step (Adam, StepLR: an open scalar table that would keep a host callback) is
    traced inside the run's fixed horizon, so JAX caches it: the second run finds its train step in the
    cache. Three steps never reach the epoch's partial last batch: its step is not compiled at all."""
    monkeypatch.setenv("PARITY_CACHE_DIR", str(tmp_path / "cache"))
    args = ["run", "--steps", "3", "--runs-dir", str(tmp_path / "runs")]
    jax.clear_caches()  # what earlier tests compiled in this process is compiled (and cached) again
    assert main(args) == 0
    assert "(compilation cache: " in capsys.readouterr().err
    steps = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith("jit_step"))
    assert len(steps) == 1
    jax.clear_caches()  # as a new process would: every compile of the second run asks the persistent cache
    hits = []
    listener = lambda event, **kwargs: hits.append(event)  # noqa: E731
    jax.monitoring.register_event_listener(listener)
    try:
        assert main(args) == 0
    finally:
        jax.monitoring.unregister_event_listener(listener)
    assert hits.count("/jax/compilation_cache/cache_hits") >= 1  # the train step read back
    # ... and so is every other compile of the run (eval forwards, the eager operations): none compiles again.
    assert hits.count("/jax/compilation_cache/cache_hits") == hits.count(
        "/jax/compilation_cache/compile_requests_use_cache")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith("jit_step")) == steps
    capsys.readouterr()
    assert main([*args, "--no-compile-cache"]) == 0
    assert "(compilation cache: " not in capsys.readouterr().err
