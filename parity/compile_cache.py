"""JAX's persistent compilation cache for ``parity run``: a second run of a config skips XLA's compile.

``parity run`` keeps compiled JAX steps in ``$PARITY_CACHE_DIR`` (default
``$XDG_CACHE_HOME/parity/jax``, i.e. ``~/.cache/parity/jax``); ``--no-compile-cache``
or ``PARITY_CACHE_DIR=""`` turns it off, and a cache the user configured for
JAX itself (``JAX_COMPILATION_CACHE_DIR``) is used as it is. JAX keys each
entry on the program, its compile options, jaxlib and the device, so a changed
config, model or library compiles afresh. Every compile is kept, the small
eager operations' too: a run of the default config compiles about 30 of
them (5-270 ms each, about a second together) and reads them back in a few
milliseconds each; an entry takes a few KB. A compiled step that calls back into Python
(a learning-rate schedule evaluated per step, dropout in a data-parallel
step) is not cached by JAX; it compiles every run. A single-device step's
dropout masks are arguments drawn on the host, so it is cached.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["compilation_cache", "default_cache_dir"]

MIN_COMPILE_SECONDS = 0.0


def default_cache_dir() -> Path | None:
    """``$PARITY_CACHE_DIR`` (empty: ``None``, no cache), else ``$XDG_CACHE_HOME/parity/jax``."""
    if "PARITY_CACHE_DIR" in os.environ:
        value = os.environ["PARITY_CACHE_DIR"].strip()
        return Path(value).expanduser() if value else None
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parity" / "jax"


@contextlib.contextmanager
def compilation_cache(directory: Path | None) -> Iterator[Path | None]:
    """JAX's persistent compilation cache in ``directory`` inside the block (``None``: off).

    Yields the directory in use: ``directory``, JAX's own when the user set
    one (``JAX_COMPILATION_CACHE_DIR``), or ``None`` when the cache is off or
    ``directory`` cannot be created. JAX's settings are restored afterwards.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    own = jax.config.jax_compilation_cache_dir
    if own or directory is None:
        yield own or None
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: the run goes on without the cache
        yield None
        return
    previous = {name: getattr(jax.config, name) for name in
                ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")}
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    # JAX decides once per process whether the cache is in use, at its first compile: reset that decision
    # so that it is taken again with the directory set (and again when the block ends).
    jax_cache.reset_cache()
    try:
        yield directory
    finally:
        for name, value in previous.items():
            jax.config.update(name, value)
        jax_cache.reset_cache()
