"""``torch.nn.functional.instance_norm`` (``aten/src/ATen/native/Normalization.cpp``, ``instance_norm``).

torch views ``(N, C, *)`` as ``(1, N * C, *)``, repeats ``weight``, ``bias`` and the running statistics
``N`` times and runs ``batch_norm`` on that (training statistics when ``use_input_stats``); the running
statistics it keeps are the mean over ``N`` of the repeated ones after the update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_impl.nn._functional_norm import batch_norm

__all__ = ["instance_norm"]


def instance_norm(input: jax.Array, running_mean: jax.Array | None = None, running_var: jax.Array | None = None,
                  weight: jax.Array | None = None, bias: jax.Array | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """``torch.nn.functional.instance_norm`` returning ``(y, new_running_mean, new_running_var)`` (as
    :func:`jax_impl.nn.functional.batch_norm` does): per sample and channel, over the spatial dimensions."""
    x = jnp.asarray(input)
    b, c = x.shape[0], x.shape[1]

    def repeated(t):
        return None if t is None else jnp.tile(t, b)

    y, rm, rv = batch_norm(x.reshape(1, b * c, *x.shape[2:]), repeated(running_mean), repeated(running_var),
                           repeated(weight), repeated(bias), use_input_stats, momentum, eps)
    new_mean = None if running_mean is None else rm.reshape(b, c).mean(0)
    new_var = None if running_var is None else rv.reshape(b, c).mean(0)
    return y.reshape(x.shape), new_mean, new_var
