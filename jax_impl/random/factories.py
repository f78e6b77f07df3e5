"""torch's random tensor factories on torch's CPU stream: ``randn``, ``randn_like``, ``normal``, ``rand``, ``randint``.

Each draws from a :class:`jax_impl.random.Generator` (default: the global
one, :data:`jax_impl.random.default_generator`, torch's
``torch.default_generator``) exactly as the torch function of the same name
draws on CPU, and returns a NumPy array of torch's default dtype (float32,
int64 for ``randint``) unless told otherwise. After
``torch.manual_seed(s)`` and ``jax_impl.random.manual_seed(s)`` the same
calls in the same order give the same numbers, bit for bit, and leave the
two generators in the same state (``get_rng_state()`` bytes equal).

``normal`` with tensor ``mean``/``std`` is torch's ``normal_out_impl``
(``native/DistributionTemplates.h``): standard normals of the broadcast
shape, then ``* std`` and ``+ mean`` in the result's dtype, each rounded;
with a tensor ``mean`` and a float ``std`` the draw is ``normal_(0, std)``
and the mean is added after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jax_impl.random.generator import Generator, default_generator

__all__ = ["bernoulli", "multinomial", "normal", "rand", "rand_like", "randint", "randn", "randn_like"]


def _gen(generator: Generator | None) -> Generator:
    return default_generator if generator is None else generator


def _size(size: tuple) -> tuple[int, ...]:
    """torch's ``*size``: ``randn(2, 3)`` or ``randn((2, 3))``."""
    if len(size) == 1 and isinstance(size[0], (Sequence, np.ndarray)) and not isinstance(size[0], str):
        return tuple(int(s) for s in size[0])
    return tuple(int(s) for s in size)


def randn(*size: int | Sequence[int], generator: Generator | None = None, dtype: Any = np.float32) -> np.ndarray:
    """``torch.randn(*size, generator=..., dtype=...)`` on CPU: standard normals (see :meth:`Generator.normal`)."""
    return _gen(generator).normal(_size(size), 0.0, 1.0, dtype)


def randn_like(x: Any, *, generator: Generator | None = None, dtype: Any = None) -> np.ndarray:
    """``torch.randn_like(x)``: :func:`randn` of ``x``'s shape and (floating) dtype.

    torch's ``randn_like`` takes no generator; ``generator`` here defaults to the global one, as torch's does.
    """
    x = np.asarray(x) if not hasattr(x, "shape") else x
    return _gen(generator).normal(tuple(x.shape), 0.0, 1.0, x.dtype if dtype is None else dtype)


def rand(*size: int | Sequence[int], generator: Generator | None = None, dtype: Any = np.float32) -> np.ndarray:
    """``torch.rand(*size, generator=..., dtype=...)`` on CPU: ``U[0, 1)`` (float32 or float64)."""
    return _gen(generator).rand(_size(size), dtype)


def rand_like(x: Any, *, generator: Generator | None = None, dtype: Any = None) -> np.ndarray:
    """``torch.rand_like(x)``: :func:`rand` of ``x``'s shape and dtype."""
    return rand(tuple(x.shape), generator=generator, dtype=x.dtype if dtype is None else dtype)


def randint(low: int, high: int | None = None, size: Sequence[int] = (), *,
            generator: Generator | None = None) -> np.ndarray:
    """``torch.randint(low, high, size)`` (or ``randint(high, size)``) on CPU, int64."""
    return _gen(generator).randint(low, high, size)


def normal(mean: Any, std: Any = 1.0, size: Sequence[int] | None = None, *, generator: Generator | None = None,
           dtype: Any = None) -> np.ndarray:
    """``torch.normal``: every overload, on torch's CPU stream.

    * ``normal(mean: float, std: float, size)``: ``empty(size).normal_(mean, std)`` (float32 unless ``dtype``);
    * ``normal(mean: array, std: float)``: ``normal_(0, std)`` of ``mean``'s shape and dtype, then ``+ mean``;
    * ``normal(mean: float, std: array)``: standard normals of ``std``'s shape, ``* std``, ``+ mean``;
    * ``normal(mean: array, std: array)``: standard normals of the broadcast shape, ``* std``, ``+ mean``.

    Raises ``RuntimeError`` with torch's message for a negative ``std``.
    """
    gen = _gen(generator)
    mean_array, std_array = isinstance(mean, (np.ndarray, np.generic)) or hasattr(mean, "shape"), \
        isinstance(std, (np.ndarray, np.generic)) or hasattr(std, "shape")
    if not mean_array and not std_array:
        if size is None:
            raise TypeError("normal() with float mean and std needs a size, as torch.normal(mean, std, size)")
        return gen.normal(tuple(size), float(mean), float(std), np.float32 if dtype is None else dtype)
    if std_array:
        std_values = np.asarray(std)
        if std_values.size and not (std_values.min() >= 0):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    if mean_array and not std_array:
        mean_values = np.asarray(mean)
        out_dtype = mean_values.dtype if dtype is None else np.dtype(dtype)
        sample = gen.normal(mean_values.shape, 0.0, float(std), out_dtype)
        return (sample + mean_values.astype(out_dtype)).astype(out_dtype)
    if std_array and not mean_array:
        out_dtype = std_values.dtype if dtype is None else np.dtype(dtype)
        sample = gen.normal(std_values.shape, 0.0, 1.0, out_dtype)
        return ((sample * std_values.astype(out_dtype)).astype(out_dtype) + out_dtype.type(mean)).astype(out_dtype)
    mean_values = np.asarray(mean)
    out_dtype = mean_values.dtype if dtype is None else np.dtype(dtype)
    shape = np.broadcast_shapes(mean_values.shape, std_values.shape)
    sample = gen.normal(shape, 0.0, 1.0, out_dtype)
    return ((sample * std_values.astype(out_dtype)).astype(out_dtype) + mean_values.astype(out_dtype)).astype(out_dtype)


def bernoulli(p: Any, *, generator: Generator | None = None) -> np.ndarray:
    """``torch.bernoulli(p)`` on CPU: 0/1 of ``p``'s shape and dtype, torch's tensor kernel (one uniform per
    element in C order: 53 bits for float64 ``p``, 24 bits otherwise, ``1`` where it is below ``p``)."""
    return _gen(generator).bernoulli_p(np.asarray(p))


def multinomial(input: Any, num_samples: int, replacement: bool = False, *,  # noqa: A002 - torch's name
                generator: Generator | None = None) -> np.ndarray:
    """``torch.multinomial(input, num_samples, replacement)`` on CPU (1-D or 2-D ``input``), int64."""
    return _gen(generator).multinomial(np.asarray(input), num_samples, replacement)
