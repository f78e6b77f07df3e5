"""One generator per data-parallel replica: torch DDP's ranks each draw dropout masks from their own.

Every torch DDP rank is a process with its own global generator; a recipe
seeds each (``torch.manual_seed(seed + rank)`` in torchvision's reference
scripts), and rank ``r``'s dropout masks come from rank ``r``'s stream. A JAX
data-parallel step runs the replicas of one named axis in one program, so
inside :func:`replica_generators` a traced draw (``jax_impl.nn`` dropout
with torch's masks) of replica ``i`` comes from ``generators[i]``:
``lax.axis_index`` travels to the host with the draw, which takes it from
that replica's generator, in that replica's program order. The same step
then draws rank ``r``'s masks on device ``r``, under ``pmap`` or
``shard_map``, in one process or several (each process needs the generators
of its own replicas only). ``vmap`` cannot: its replicas share one
callback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from jax_impl.random.generator import Generator, staged_bernoulli_per_replica

__all__ = ["current_replica_generators", "replica_generators", "staged_bernoulli"]

_ACTIVE: list[tuple[str, tuple[Generator | None, ...]] | None] = [None]


@contextlib.contextmanager
def replica_generators(axis_name: str, generators: Sequence[Generator | None]) -> Iterator[None]:
    """Traced draws inside the block: replica ``i`` of ``axis_name`` draws from ``generators[i]``.

    Read while a function is traced (as ``jax.jit`` traces on its first call):
    the compiled step keeps the routing. ``None`` marks a replica another
    process runs (a draw routed to it raises).
    """
    previous = _ACTIVE[0]
    _ACTIVE[0] = (axis_name, tuple(generators))
    try:
        yield
    finally:
        _ACTIVE[0] = previous


def current_replica_generators() -> tuple[str, tuple[Generator | None, ...]] | None:
    """``(axis name, generators)`` of the enclosing :func:`replica_generators`, or ``None``."""
    return _ACTIVE[0]


def staged_bernoulli(size: Sequence[int], p: float, *, tied_to: Any) -> Any:
    """The current replica's :meth:`Generator.staged_bernoulli` (inside :func:`replica_generators`)."""
    active = current_replica_generators()
    if active is None:
        raise RuntimeError("replica draws need an enclosing jax_impl.random.replica_generators(axis_name, ...)")
    axis_name, generators = active
    return staged_bernoulli_per_replica(generators, axis_name, size, p, tied_to=tied_to)
