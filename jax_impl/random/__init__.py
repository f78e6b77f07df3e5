"""torch's CPU random number generator without torch: ``torch.Generator`` and ``torch.random``.

The base layer under ``jax_impl.nn``, ``jax_impl.data`` and ``jax_impl.optim``:
layer initialisers, samplers, random transforms and dropout masks all draw
from these generators, so after ``torch.manual_seed(s)`` and
``jax_impl.random.manual_seed(s)`` both frameworks see the same numbers.

- :class:`Generator` reproduces a CPU ``torch.Generator`` (MT19937) draw for
  draw, state bytes included;
- :data:`default_generator`, :func:`manual_seed`, :func:`initial_seed`,
  :func:`seed`, :func:`get_rng_state`, :func:`set_rng_state` mirror
  ``torch.default_generator`` and the functions of ``torch/random.py``;
- :func:`randn`, :func:`randn_like`, :func:`normal`, :func:`rand`,
  :func:`rand_like`, :func:`randint`, :func:`bernoulli`, :func:`multinomial`:
  torch's tensor factories on that
  stream, normal draws included (torch's Box-Muller kernels, bit for bit);
- :mod:`jax_impl.random.staged`: the same draws inside ``jax.jit``-compiled
  steps (latents, noise, timesteps, actions), drawn on the host before each
  call or as ordered callbacks, in torch's order;
- :func:`replica_generators`: one generator per data-parallel replica, as
  torch DDP's ranks each have their own (traced dropout draws).
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
from jax_impl.random.factories import bernoulli, multinomial, normal, rand, rand_like, randint, randn, randn_like
from jax_impl.random.replicas import current_replica_generators, replica_generators

__all__ = [
    "DEFAULT_SEED", "Generator", "default_generator", "get_rng_state", "initial_seed", "manual_seed", "seed",
    "set_rng_state", "current_replica_generators", "replica_generators", "normal", "rand", "rand_like", "randint",
    "randn", "randn_like", "bernoulli", "multinomial",
]
