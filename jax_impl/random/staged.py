"""torch's draws inside a traced function: a GAN's latents, a VAE's noise, a diffusion step's timesteps, a
policy's actions, in a ``jax.jit``-compiled step.

Each function here is the traceable twin of a torch call: the numbers are
torch's, drawn from :data:`jax_impl.random.default_generator` (or
``generator=``) in program order. Inside
:func:`jax_impl.random.host_draws.jit_with_host_draws` (what
``jax_impl.train``'s steps use) they are drawn on the host before each call
and passed in; under a plain ``jax.jit`` each is an ordered host callback;
eagerly they are a callback run at once. Either way the stream is torch's:
a draw made on the host between two calls comes between them, as in torch.

Draws that depend on values computed inside the function (``bernoulli(p)``,
``normal(mean, std)``, ``categorical(probs)``) draw the value-free part
(uniforms, standard normals, exponentials) and finish in the graph with
torch's own arithmetic: ``u < p``, ``eps * std`` rounded before ``+ mean``
(XLA would fuse the two into one FMA), ``argmax(p / q)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.kernels import rounded, runtime_zero_of
from jax_impl.random.generator import Generator, default_generator

__all__ = ["bernoulli", "bernoulli_fill", "categorical", "exponential", "normal", "normal_fill", "rand", "rand_like",
           "randint", "randn", "randn_like"]


def _gen(generator: Generator | None) -> Generator:
    return default_generator if generator is None else generator


def _size(size: tuple) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (Sequence, np.ndarray)) and not isinstance(size[0], str):
        return tuple(int(s) for s in size[0])
    return tuple(int(s) for s in size)


def randn(*size: int | Sequence[int], dtype: Any = jnp.float32, generator: Generator | None = None) -> jax.Array:
    """``torch.randn(*size, dtype=dtype)``, traceable."""
    return _gen(generator).staged_normal(_size(size), 0.0, 1.0, jnp.dtype(dtype))


def randn_like(x: Any, *, dtype: Any = None, generator: Generator | None = None) -> jax.Array:
    """``torch.randn_like(x)``, traceable; the draw follows ``x``'s computation (and ``jax.vmap`` over it
    raises, as ``torch.func.vmap``'s ``randomness="error"``)."""
    return _gen(generator).staged_normal(x.shape, 0.0, 1.0, jnp.dtype(x.dtype if dtype is None else dtype),
                                         tied_to=x)


def rand(*size: int | Sequence[int], dtype: Any = jnp.float32, generator: Generator | None = None) -> jax.Array:
    """``torch.rand(*size, dtype=dtype)``, traceable (float32 or float64)."""
    return _gen(generator).staged_rand(_size(size), jnp.dtype(dtype))


def rand_like(x: Any, *, dtype: Any = None, generator: Generator | None = None) -> jax.Array:
    """``torch.rand_like(x)``, traceable."""
    return _gen(generator).staged_rand(x.shape, jnp.dtype(x.dtype if dtype is None else dtype), tied_to=x)


def randint(low: int, high: int | None = None, size: Sequence[int] = (), *,
            generator: Generator | None = None) -> jax.Array:
    """``torch.randint(low, high, size)``, traceable: int64 with jax's x64, else int32 (the values are torch's
    either way while they fit)."""
    return _gen(generator).staged_randint(low, high, size)


def exponential(size: Sequence[int], lambd: float = 1.0, dtype: Any = jnp.float32, *,
                generator: Generator | None = None) -> jax.Array:
    """``torch.empty(size, dtype=dtype).exponential_(lambd)``, traceable."""
    return _gen(generator).staged_exponential(tuple(size), lambd, jnp.dtype(dtype))


def normal(mean: Any, std: Any = 1.0, size: Sequence[int] | None = None, *,
           generator: Generator | None = None) -> jax.Array:
    """``torch.normal`` with float or array ``mean``/``std`` (arrays may be traced), traceable.

    Float ``mean`` and ``std``: ``empty(size).normal_(mean, std)``. An array ``mean`` with a float ``std``:
    ``normal_(0, std)`` then ``+ mean``. Otherwise standard normals, ``* std`` (rounded on its own) and
    ``+ mean``, torch's two roundings.
    """
    gen = _gen(generator)
    mean_is_array, std_is_array = hasattr(mean, "shape"), hasattr(std, "shape")
    if not mean_is_array and not std_is_array:
        if size is None:
            raise TypeError("normal() with float mean and std needs a size, as torch.normal(mean, std, size)")
        return gen.staged_normal(tuple(size), float(mean), float(std), jnp.float32)
    if mean_is_array and not std_is_array:
        mean = jnp.asarray(mean)
        eps = gen.staged_normal(mean.shape, 0.0, float(std), mean.dtype, tied_to=mean)
        return eps + rounded(mean, runtime_zero_of(eps))
    std = jnp.asarray(std)
    dtype = jnp.asarray(mean).dtype if mean_is_array else std.dtype
    shape = jnp.broadcast_shapes(jnp.shape(mean), std.shape)
    eps = gen.staged_normal(shape, 0.0, 1.0, dtype, tied_to=std)
    # Both terms rounded on their own, as torch's separate mul_ and add_ see them: XLA would otherwise fuse the
    # product, or a product the caller computed the mean with, into the addition.
    zero = runtime_zero_of(eps)
    return rounded(eps * std.astype(dtype), zero) + rounded(jnp.asarray(mean, dtype), zero)


def bernoulli(p: Any, *, generator: Generator | None = None) -> jax.Array:
    """``torch.bernoulli(p)``, traceable: one uniform per element of ``p`` in C order (53 bits for float64
    ``p``, 24 otherwise), ``1`` where it is below ``p``; 0/1 in ``p``'s dtype."""
    p = jnp.asarray(p)
    wide = p.dtype == jnp.float64
    u = _gen(generator).staged_rand(p.shape, jnp.float64 if wide else jnp.float32, tied_to=p)
    return (u < p.astype(u.dtype)).astype(p.dtype)


def bernoulli_fill(x: Any, p: Any = 0.5, *, generator: Generator | None = None) -> jax.Array:
    """``x.bernoulli_(p)``, traceable: 0/1 of ``x``'s shape and dtype (``x``'s values are not read).

    A number ``p`` is torch's scalar kernel, the one dropout's masks come from: one ``random64()`` per
    element in C order, ``1`` where its 53 low bits over ``2**53`` are below ``p``. A tensor ``p``, broadcast
    to ``x``'s shape, is torch's tensor kernel: :func:`bernoulli` of the broadcast ``p`` (a 53-bit uniform
    for float64 ``p``, a 24-bit one otherwise). ``timm``'s stochastic depth,
    ``x.new_empty(shape).bernoulli_(keep_prob)``, is the first.
    """
    x = jnp.asarray(x)
    if isinstance(p, (bool, int, float, np.floating, np.integer)):
        mask = _gen(generator).staged_bernoulli(x.shape, float(p), tied_to=x)
        return mask.astype(x.dtype)
    return bernoulli(jnp.broadcast_to(jnp.asarray(p), x.shape), generator=generator).astype(x.dtype)


def normal_fill(x: Any, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None) -> jax.Array:
    """``x.normal_(mean, std)``, traceable: torch's normals of ``x``'s shape and (floating) dtype, as
    ``torch.empty(x.shape, dtype=x.dtype).normal_(mean, std)`` draws them (``x``'s values are not read)."""
    x = jnp.asarray(x)
    return _gen(generator).staged_normal(x.shape, float(mean), float(std), jnp.dtype(x.dtype), tied_to=x)


def categorical(probs: Any, *, generator: Generator | None = None) -> jax.Array:
    """``torch.multinomial(probs, 1).squeeze(-1)`` (what ``Categorical(probs).sample()`` draws), traceable.

    torch draws ``q = exponential_(1)`` for every element of ``probs`` (C order, in ``probs``' dtype) and
    takes ``argmax(probs / q)`` along the last dimension; ``probs`` need not be normalised (normalise as
    ``Categorical`` does first to draw what it draws).
    """
    probs = jnp.asarray(probs)
    q = _gen(generator).staged_exponential(probs.shape, 1.0, probs.dtype, tied_to=probs)
    return jnp.argmax(probs / q, axis=-1)
