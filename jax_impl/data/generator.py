"""``jax_impl.data.generator``: the names of :mod:`jax_impl.random.generator`, kept at this path.

torch's generator is not a data-loading piece (layer init and dropout draw
from it too), so it lives in :mod:`jax_impl.random`; this module re-exports
it for code written against ``jax_impl.data.generator``.
"""

from jax_impl.random.generator import (
    DEFAULT_SEED,
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)

__all__ = [
    "DEFAULT_SEED", "Generator", "default_generator", "get_rng_state", "initial_seed", "manual_seed", "seed",
    "set_rng_state",
]
