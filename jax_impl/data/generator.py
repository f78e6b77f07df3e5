"""``jax_impl.data.generator``: the names of :mod:`jax_impl.random`, kept at this path.

torch's generator is not a data-loading piece (layer init and dropout draw
from it too), so it lives in :mod:`jax_impl.random`; this module re-exports
it for code written against ``jax_impl.data.generator``.
"""

from jax_impl.random import *  # noqa: F403
from jax_impl.random import __all__  # noqa: F401
