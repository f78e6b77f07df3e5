"""torch.nn.functional's ``dropout`` and ``dropout1d/2d/3d``, with torch's masks from torch's generator.

torch's CPU dropout in training mode (``at::dropout`` -> ``_dropout_impl`` in
``aten/src/ATen/native/Dropout.cpp``; the fused ``native_dropout`` serves
only CUDA, XPU, lazy and privateuse1 tensors)::

    noise = empty_like(input)       # feature dropout: empty(N, C, 1, ..., 1)
    noise.bernoulli_(1 - p)         # mask ~ Bernoulli(1 - p): 1 keeps the element
    noise.div_(1 - p)               # 1 / (1 - p), rounded to the input's dtype
    return input * noise            # y = x * mask / (1 - p)

``p == 0``, eval mode (``training=False``) and empty inputs return the input
and draw nothing; ``p == 1`` returns ``input * 0`` (zeros, ``-0`` for
negatives, NaN kept) and draws nothing.

Where the mask comes from:

- ``rng=None`` (the default): torch's stream. ``bernoulli_(1 - p)`` on CPU
  is ``templates::cpu::bernoulli_kernel``: one ``random64()`` of the global
  generator per noise element, in C order, kept where
  ``(r & (2**53 - 1)) * 2**-53 < 1 - p`` in double, for every dtype and any
  thread count. The mask is drawn from ``jax_impl.random.default_generator``
  (seeded by ``jax_impl.random.manual_seed`` as torch's by
  ``torch.manual_seed``), so it is bit-identical to torch's and leaves the
  generator where torch leaves it. Called eagerly, the mask is drawn at the
  call; traced (``jax.jit``, ``nnx.jit``, ``jax.grad``), it is an ordered
  host callback that draws each time the compiled function runs
  (:meth:`jax_impl.random.Generator.staged_bernoulli`). ``jax.vmap`` over
  it raises, as ``torch.func.vmap`` refuses random draws by default, and so
  does ``jax.checkpoint`` (JAX refuses ordered effects there): use ``rng=``.
  Inside ``jax_impl.random.replica_generators(axis_name, generators)`` a
  data-parallel step's replica ``i`` draws from ``generators[i]``, as torch
  DDP's rank ``i`` draws from its own global generator.
- ``rng=<jax PRNG key>``: ``jax.random.bernoulli(rng, 1 - p, noise_shape)``,
  for users who do not need torch's numbers (no host callback).

``inplace=`` is accepted and ignored: JAX arrays are immutable, the result is returned.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl.random import current_replica_generators, default_generator
from jax_impl.random.replicas import staged_bernoulli as replica_staged_bernoulli

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d"]


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(x, keep_prob: float, rng, noise_shape: tuple[int, ...]):
    """torch's ``bernoulli_(1 - p)`` on the noise tensor as a bool mask, or jax's from ``rng``."""
    if rng is not None:
        return jax.random.bernoulli(rng, keep_prob, noise_shape)
    if isinstance(x, jax.core.Tracer):
        if current_replica_generators() is not None:  # a data-parallel step: each replica its rank's stream
            return replica_staged_bernoulli(noise_shape, keep_prob, tied_to=x)
        return default_generator.staged_bernoulli(noise_shape, keep_prob, tied_to=x)
    return jnp.asarray(default_generator.bernoulli(noise_shape, keep_prob))


def _dropout_impl(x, p: float, training: bool, rng, feature: bool):
    """aten's ``_dropout_impl``: early returns, the noise, its scale, ``input * noise``."""
    if p == 0 or not training or x.size == 0:
        return x
    if p == 1:
        return x * jnp.zeros((), x.dtype)
    if feature:
        # make_feature_noise: one draw per (batch, channel), broadcast over the other dims.
        if x.ndim < 2:
            raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
        noise_shape = x.shape[:2] + (1,) * (x.ndim - 2)
    else:
        noise_shape = x.shape
    keep_prob = 1 - float(p)  # in double, as aten's `1 - p`
    keep = _keep_mask(x, keep_prob, rng, noise_shape)
    # noise.div_(1 - p): the scalar is rounded to the tensor's dtype, then 1 / it.
    scale = jnp.asarray(1, x.dtype) / jnp.asarray(np.float64(keep_prob), x.dtype)
    return x * jnp.where(keep, scale, jnp.zeros((), x.dtype))


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, rng=None):
    """``torch.nn.functional.dropout``: ``y = x * mask / (1 - p)``, ``mask ~ Bernoulli(1 - p)`` per element.

    Args:
      input: array of any shape.
      p: probability of an element to be zeroed; ``ValueError`` outside ``[0, 1]``.
      training: apply dropout if ``True``; otherwise return ``input``.
      inplace: accepted for torch's signature; the result is returned.
      rng: ``None`` draws torch's mask from ``jax_impl.random.default_generator``
        (one ``random64()`` per element, as torch's CPU kernel); a jax PRNG
        key draws a jax mask instead.
    """
    _check_p(p)
    return _dropout_impl(jnp.asarray(input), p, training, rng, feature=False)


def _feature_dropout(x, p: float, training: bool, rng, unsqueeze: bool):
    """``_VF.feature_dropout`` on ``x`` (after torch's ``unsqueeze(0)`` for an unbatched input)."""
    if unsqueeze:
        return _dropout_impl(x[None], p, training, rng, feature=True)[0]
    return _dropout_impl(x, p, training, rng, feature=True)


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, rng=None):
    """``torch.nn.functional.dropout1d``: zero whole channels of ``(N, C, L)`` or ``(C, L)``.

    One Bernoulli(1 - p) draw per ``(n, c)`` (per ``c`` unbatched), in C order,
    from the stream ``rng`` selects as in :func:`dropout`; other ranks raise
    ``RuntimeError`` as torch does.
    """
    _check_p(p)
    x = jnp.asarray(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {x.ndim}D input. "
            "Note that dropout1d exists to provide channel-wise dropout on inputs with 1 "
            "spatial dimension, a channel dimension, and an optional batch dimension "
            "(i.e. 2D or 3D inputs)."
        )
    return _feature_dropout(x, p, training, rng, unsqueeze=x.ndim == 2)


def _warn_rank(name: str, ndim: int, spatial: int) -> None:
    warnings.warn(
        f"{name}: Received a {ndim}-D input to {name}, which is deprecated "
        "and will result in an error in a future release. To retain the behavior "
        f"and silence this warning, please use dropout instead. Note that {name} "
        f"exists to provide channel-wise dropout on inputs with {spatial} spatial dimensions, "
        f"a channel dimension, and an optional batch dimension (i.e. {spatial + 1}D or {spatial + 2}D inputs).",
        stacklevel=3,
    )


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, rng=None):
    """``torch.nn.functional.dropout2d``: zero whole channels of ``(N, C, H, W)``.

    As torch, a 3-D input is read as ``(N, C, L)`` (one draw per ``(n, c)``,
    with torch's warning), and other ranks warn and drop per ``(dim0, dim1)``.
    The stream follows ``rng`` as in :func:`dropout`.
    """
    _check_p(p)
    x = jnp.asarray(input)
    if x.ndim not in (3, 4):
        _warn_rank("dropout2d", x.ndim, 2)
    if x.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
            "1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return _feature_dropout(x, p, training, rng, unsqueeze=False)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, rng=None):
    """``torch.nn.functional.dropout3d``: zero whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)``.

    Inputs of other ranks warn, as in torch, and are unsqueezed to a batch of
    one like a 4-D input. The stream follows ``rng`` as in :func:`dropout`.
    """
    _check_p(p)
    x = jnp.asarray(input)
    if x.ndim not in (4, 5):
        _warn_rank("dropout3d", x.ndim, 3)
    return _feature_dropout(x, p, training, rng, unsqueeze=x.ndim != 5)
