"""``torch.nn.init`` as pure functions of a PRNG key.

Every initialiser is ``f(key, shape, dtype=jnp.float32, **torch_kwargs) -> jax.Array``
and draws from the *same distribution* as its torch namesake (same bounds,
std, fan mode and gain; same validation messages).

``key`` is a jax PRNG key (same distribution, other bits), or a
:class:`jax_impl.random.Generator` / ``None`` (torch's global generator,
``jax_impl.random.default_generator``): then the uniform-based initialisers
(``uniform_``, ``xavier_uniform_``, ``kaiming_uniform_`` and the layers'
defaults) draw **the same numbers as torch on CPU**, so after
``torch.manual_seed(s)`` and ``jax_impl.random.manual_seed(s)`` the same layers
built in the same order hold identical weights. torch's CPU ``uniform_``
(``aten/src/ATen/core/TransformationHelper.h`` ``uniform_real``) is, per
element in row-major order,

- float32: ``float32(double(random() & (2**24 - 1)) * 2**-24 * double(float32(b - a)) + double(a))``
- float64: ``fma((random64() & (2**53 - 1)) * 2**-53, b - a, a)`` (one rounding).

The normal-based initialisers (``normal_``, ``xavier_normal_``,
``kaiming_normal_``, ``sparse_``) given a generator draw torch's numbers too,
through :meth:`jax_impl.random.Generator.normal` (torch's CPU Box-Muller
kernels, bit for bit); ``orthogonal_`` draws torch's numbers and factors
them with NumPy's LAPACK (equal to torch's to the QR's rounding).
``trunc_normal_`` runs torch's rejection sampler on torch's draws (see its
docstring).
Formulas follow torch 2.13 ``torch/nn/init.py``:

- ``xavier_uniform_``:  U(-a, a), a = gain * sqrt(3) * sqrt(2 / (fan_in + fan_out))
- ``xavier_normal_``:   N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))
- ``kaiming_uniform_``: U(-b, b), b = sqrt(3) * gain(nonlinearity, a) / sqrt(fan)
- ``kaiming_normal_``:  N(0, std^2), std = gain(nonlinearity, a) / sqrt(fan)

with ``fan_in = shape[1] * prod(shape[2:])``, ``fan_out = shape[0] * prod(shape[2:])``.
``linear_default`` / ``conv_default`` reproduce the layers' ``reset_parameters``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_impl import _constants
from jax_impl.random import Generator, default_generator
from jax_impl.random.fma import fma64

__all__ = [
    "calculate_gain",
    "calculate_fan_in_and_fan_out",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
    "linear_default",
    "conv_default",
]

Shape = Sequence[int]

_LINEAR_FNS = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
)


def calculate_gain(nonlinearity: str, param: int | float | None = None) -> float:
    """Recommended gain for ``nonlinearity``; values and errors as torch's."""
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        # torch rejects bool (an int subclass) but accepts any other int or float.
        elif not isinstance(param, bool) and isinstance(param, int) or isinstance(param, float):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def calculate_fan_in_and_fan_out(shape: Shape) -> tuple[int, int]:
    """torch's ``_calculate_fan_in_and_fan_out`` for a weight of ``shape``."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive_field_size = math.prod(shape[2:])
    return shape[1] * receptive_field_size, shape[0] * receptive_field_size


def _calculate_correct_fan(shape: Shape, mode: str) -> int:
    mode = mode.lower()  # torch lower-cases before validating (and in the message)
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    return fan_in if mode == "fan_in" else fan_out


def _cpp_float(x: float) -> str:
    # ATen formats doubles through an ostream (precision 6): 1 -> "1", 3e38 -> "3e+38".
    return f"{x:g}"


def uniform_(key, shape: Shape, dtype=jnp.float32, a: float = 0.0, b: float = 1.0) -> jax.Array:
    """U(a, b) on [a, b), like ``Tensor.uniform_`` (including its range checks)."""
    if a > b:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found "
            f"from={_cpp_float(a)} > to={_cpp_float(b)}"
        )
    if b - a > float(jnp.finfo(dtype).max):
        raise RuntimeError(
            "uniform_ expects to-from <= std::numeric_limits<Float>::max(), but found "
            f"to={_cpp_float(b)} and from={_cpp_float(a)} which result in to-from to exceed the limit"
        )
    if key is None or isinstance(key, Generator):
        return _torch_uniform(key, tuple(shape), dtype, a, b)
    return _jax_draw(jax.random.uniform, key, tuple(shape), dtype, minval=a, maxval=b)


def _jax_draw(draw, key, shape: tuple[int, ...], dtype, **kwargs) -> jax.Array:
    """``draw(key, shape, dtype, **kwargs)`` (``jax.random.uniform`` or ``normal``): the same numbers,
    drawn flat at a size of a few buckets and cut to ``shape`` on the host.

    With jax's partitionable threefry (its default) element ``i`` of a draw
    depends only on the key and ``i``, so a longer flat draw starts with the
    same numbers. Eagerly each distinct shape would compile its own draw, and
    a multi-dimensional one compiles 4-7x slower than a flat one (0.6-1 s on
    a 2-core host): a model's initialisation compiled once per weight shape
    (ResNet-18: 13 s). Sizes in powers of 4 from 1024 serve every weight with
    a few compiled draws; the cut and reshape run in NumPy (nothing to
    compile). Under a trace (``jit``, ``eval_shape``) the draw is the exact
    shape, as nothing compiles per call there.
    """
    n = math.prod(shape)
    if not jax.config.jax_threefry_partitionable or n == 0 or isinstance(key, jax.core.Tracer):
        return draw(key, shape, dtype, **kwargs)
    size = 1024
    while size < n:
        size *= 4
    return _placed(np.asarray(draw(key, (size,), dtype, **kwargs))[:n].reshape(shape))


def _placed(values: Any, dtype: Any = None) -> jax.Array:
    """Host values (a draw made in NumPy) on jax's default device, cast to ``dtype`` on the host.

    ``jnp.asarray`` of a NumPy array is a computation of its own (an identity, or a cast when the dtype
    changes), compiled for every shape it meets: a model's initialisation would compile one per weight
    shape. NumPy's cast rounds as XLA's does (to nearest, ties to even) and keeps subnormals, as torch's
    ``.to`` does.
    """
    values = np.asarray(values)
    if dtype is not None:
        values = values.astype(jax.dtypes.canonicalize_dtype(dtype), copy=False)
    if values.base is not None:  # a cut of a larger draw: the device array would keep all of it alive
        values = values.copy()
    return jax.device_put(values)


def _torch_uniform(generator: Generator | None, shape: tuple[int, ...], dtype, a: float, b: float) -> jax.Array:
    """torch's CPU ``uniform_`` bit for bit, drawing from ``generator`` (default: torch's global one)."""
    return _placed(_torch_uniform_host(generator, shape, dtype, a, b), dtype)


def _torch_uniform_host(generator: Generator | None, shape: tuple[int, ...], dtype, a: float, b: float) -> np.ndarray:
    """:func:`_torch_uniform` as a NumPy array (float64 stays float64 without jax's x64)."""
    gen = default_generator if generator is None else generator
    n = math.prod(shape)
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        r = gen.random_u32(n) & np.uint32(2**24 - 1)
        a32, b32 = np.float32(a), np.float32(b)
        out = r.astype(np.float64) * 2.0**-24 * np.float64(b32 - a32) + np.float64(a32)
        return out.astype(np.float32).reshape(shape)
    if dtype == jnp.float64:
        r = gen.random_u64(n) & np.uint64(2**53 - 1)
        # torch's compiled kernel contracts x * (b - a) + a into one fused multiply-add.
        return fma64(r.astype(np.float64) * 2.0**-53, np.float64(b - a), np.float64(a)).reshape(shape)
    raise NotImplementedError(f"torch-identical uniform_ draws for dtype {dtype}; pass a jax PRNG key instead")


def normal_(key, shape: Shape, dtype=jnp.float32, mean: float = 0.0, std: float = 1.0) -> jax.Array:
    """N(mean, std^2), like ``Tensor.normal_`` (which rejects std < 0).

    From a :class:`Generator` (or ``None``: the global one) these are torch's numbers:
    :meth:`jax_impl.random.Generator.normal`, torch's CPU ``normal_kernel`` bit for bit.
    """
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_cpp_float(std)}")
    if key is None or isinstance(key, Generator):
        gen = default_generator if key is None else key
        return _placed(gen.normal(tuple(shape), mean, std, jnp.dtype(dtype)), dtype)
    sample = _jax_draw(jax.random.normal, key, tuple(shape), dtype)
    if isinstance(sample, jax.core.Tracer) or jnp.dtype(dtype) not in (jnp.float32, jnp.float64):
        return mean + std * sample
    # In NumPy, with the same two roundings as jax's eager multiply and add: nothing to compile per shape.
    values = np.asarray(sample)  # float32 when dtype asks float64 without x64, as jax gives it
    return _placed(values.dtype.type(mean) + values.dtype.type(std) * values)


def trunc_normal_(
    key,
    shape: Shape,
    dtype=jnp.float32,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
) -> jax.Array:
    """N(mean, std^2) truncated to [a, b], by torch's rejection sampler.

    torch (``_no_grad_trunc_normal_``): when the window holds more than 30% of the mass,
    ``normal_(mean, std)`` for the whole tensor, then while an element lies outside ``[a, b]`` (bounds in the
    tensor's dtype) a whole new ``normal_`` draw replaces the elements outside. Otherwise ``uniform_(a, b)``
    candidates accepted where ``log(uniform_()) > -((x - mean) / std)^2 / 2 - log_peak``, the rejected ones
    redrawn the same way (a whole tensor of candidates and of uniforms each round). From a
    :class:`Generator` (or ``None``) these are torch's draws in torch's order: the first branch is torch's
    numbers bit for bit; in the second, NumPy's ``log`` stands in for torch's (MKL's), which can flip an
    acceptance only where the two logs straddle the bound (not seen in the tests). From a jax key:
    ``jax.random.truncated_normal`` (the same law).
    """
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
            "The distribution of values may be incorrect.",
            stacklevel=2,
        )
    if key is None or isinstance(key, Generator):
        work = np.dtype(jnp.dtype(dtype))
        gen = default_generator if key is None else key
        return _placed(_torch_trunc_normal(gen, tuple(shape), work, mean, std, a, b), dtype)
    lower, upper = (a - mean) / std, (b - mean) / std
    z = jax.random.truncated_normal(key, lower, upper, tuple(shape), jnp.float32)
    # Rounding mean + std*z to dtype could step outside [a, b]; torch never returns such values.
    return jnp.clip(mean + std * z, a, b).astype(dtype)


def _torch_trunc_normal(gen: Generator, shape: tuple[int, ...], work: np.dtype, mean: float, std: float, a: float,
                        b: float) -> np.ndarray:
    """torch 2.13's ``_no_grad_trunc_normal_`` on the host (see :func:`trunc_normal_`)."""

    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    t = work.type
    if norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std) > 0.3:
        lo, hi = t(a), t(b)
        result = gen.normal(shape, mean, std, work)
        while True:
            outside = (result < lo) | (result > hi)
            if not outside.any():
                return result
            result = np.where(outside, gen.normal(shape, mean, std, work), result)
    mode = max(a, min(mean, b))
    log_peak = -0.5 * ((mode - mean) / std) ** 2

    def log_pdf(x: np.ndarray) -> np.ndarray:
        # candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak): one rounding each, in the dtype.
        y = (x - t(mean)) / t(std)
        return y * y * t(-0.5) - t(log_peak)

    def accepted(candidates: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(gen.rand(shape, work)) > log_pdf(candidates)

    result = _torch_uniform_host(gen, shape, work, a, b)
    pending = accepted(result)
    while pending.any():
        candidates = _torch_uniform_host(gen, shape, work, a, b)
        result = np.where(pending, candidates, result)
        pending = np.where(pending, accepted(candidates), pending)
    return result


def constant_(key, shape: Shape, dtype=jnp.float32, val: float = 0.0) -> jax.Array:
    """Fill with ``val`` (``key`` is unused; kept for a uniform signature), converted as torch's ``fill_``
    converts it.

    Filled on the host and placed on jax's default CPU device, as the random initialisers' draws are:
    ``jnp.full`` would be a computation of its own, compiled for every shape it meets before a model's first
    step. Inside a trace (``nnx.eval_shape``, a jitted init) or on an accelerator, ``jnp.full``.
    """
    del key
    return _constants.full(tuple(shape), val, dtype)


def ones_(key, shape: Shape, dtype=jnp.float32) -> jax.Array:
    return constant_(key, shape, dtype, 1.0)


def zeros_(key, shape: Shape, dtype=jnp.float32) -> jax.Array:
    return constant_(key, shape, dtype, 0.0)


def eye_(key, shape: Shape, dtype=jnp.float32) -> jax.Array:
    """Identity of a 2-D ``shape`` (as ``torch.eye(*shape)``)."""
    del key
    if len(shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _placed(np.eye(*shape), dtype)


def dirac_(key, shape: Shape, dtype=jnp.float32, groups: int = 1) -> jax.Array:
    """Dirac delta for a {3,4,5}-D conv weight; each group preserves identity."""
    del key
    shape = tuple(shape)
    if len(shape) not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_chans_per_grp = shape[0] // groups
    min_dim = min(out_chans_per_grp, shape[1])
    w = np.zeros(shape, dtype=np.float32)
    centre = tuple(s // 2 for s in shape[2:])
    for g in range(groups):
        for d in range(min_dim):
            w[(g * out_chans_per_grp + d, d, *centre)] = 1
    return _placed(w, dtype)


def xavier_uniform_(key, shape: Shape, dtype=jnp.float32, gain: float = 1.0) -> jax.Array:
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(key, shape, dtype, -a, a)


def xavier_normal_(key, shape: Shape, dtype=jnp.float32, gain: float = 1.0) -> jax.Array:
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(key, shape, dtype, 0.0, std)


def _kaiming_std(shape: Shape, a: float, mode: str, nonlinearity: str) -> float | None:
    # torch checks for zero elements *before* validating mode: warn, skip the rest.
    if 0 in tuple(shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    fan = _calculate_correct_fan(shape, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(
    key,
    shape: Shape,
    dtype=jnp.float32,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
) -> jax.Array:
    """``torch.nn.init.kaiming_uniform_``: U(-b, b), ``b = gain(nonlinearity, a) * sqrt(3 / fan_mode)``."""
    std = _kaiming_std(shape, a, mode, nonlinearity)
    if std is None:
        return jnp.zeros(tuple(shape), dtype)
    bound = math.sqrt(3.0) * std
    return uniform_(key, shape, dtype, -bound, bound)


def kaiming_normal_(
    key,
    shape: Shape,
    dtype=jnp.float32,
    a: float = 0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
) -> jax.Array:
    """``torch.nn.init.kaiming_normal_``: N(0, std²), ``std = gain(nonlinearity, a) / sqrt(fan_mode)``."""
    std = _kaiming_std(shape, a, mode, nonlinearity)
    if std is None:
        return jnp.zeros(tuple(shape), dtype)
    return normal_(key, shape, dtype, 0.0, std)


def orthogonal_(key, shape: Shape, dtype=jnp.float32, gain: float = 1) -> jax.Array:
    """(Semi-)orthogonal matrix times ``gain``, trailing dims flattened (Haar via QR sign fix).

    torch draws ``normal_(0, 1)`` of ``(rows, cols)`` in the tensor's dtype, factors it (transposed when
    ``rows < cols``) with ``torch.linalg.qr`` and multiplies ``Q`` by the signs of ``R``'s diagonal. From a
    :class:`Generator` the draw is torch's; the factorisation is NumPy's LAPACK, which agrees with torch's
    to the QR's rounding (tests/nn/test_init_torch_numbers.py measures it).
    """
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if math.prod(shape) == 0:
        return jnp.zeros(shape, dtype)
    rows = shape[0]
    cols = math.prod(shape) // rows
    if key is None or isinstance(key, Generator):
        gen = default_generator if key is None else key
        work = np.float64 if jnp.dtype(dtype) == jnp.float64 else np.float32
        flattened = gen.normal((rows, cols), 0.0, 1.0, work)
        if rows < cols:
            flattened = flattened.T
        q, r = np.linalg.qr(flattened)
        q = q * np.sign(np.diagonal(r)).astype(work)
        if rows < cols:
            q = q.T
        return _placed((q.reshape(shape) * work(gain)).astype(work), dtype)
    work = jnp.promote_types(dtype, jnp.float32)  # QR needs >= float32
    flattened = jax.random.normal(key, (rows, cols), work)
    if rows < cols:
        flattened = flattened.T
    q, r = jnp.linalg.qr(flattened)
    # Make Q Haar-distributed (https://arxiv.org/pdf/math-ph/0609050.pdf), as torch does.
    q = q * jnp.sign(jnp.diagonal(r))
    if rows < cols:
        q = q.T
    return (q.reshape(shape) * gain).astype(dtype)


def sparse_(key, shape: Shape, dtype=jnp.float32, sparsity: float = 0.0, std: float = 0.01) -> jax.Array:
    """N(0, std^2) with ``ceil(sparsity * rows)`` random zeros in every column.

    torch draws ``normal_(0, std)`` from the given generator, then for each column ``randperm(rows)`` from
    the *global* generator (``torch.randperm`` without ``generator=``) and zeros its first rows; from a
    :class:`Generator` (or ``None``) both draws are torch's, in that order.
    """
    shape = tuple(shape)
    if len(shape) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = shape
    # torch zeros ``randperm(rows)[:num_zeros]``; Python slicing (also for a negative
    # num_zeros) decides how many rows that really is.
    n_zero = len(range(rows)[: math.ceil(sparsity * rows)])
    if key is None or isinstance(key, Generator):
        values = np.array(normal_(key, shape, dtype, 0.0, std))
        for col in range(cols):
            values[default_generator.randperm(rows)[:n_zero], col] = 0
        return _placed(values, dtype)
    k_val, k_perm = jax.random.split(key)
    values = normal_(k_val, shape, dtype, 0.0, std)
    # A uniformly random subset of n_zero rows per column: ranks of i.i.d. uniforms.
    ranks = jnp.argsort(jnp.argsort(jax.random.uniform(k_perm, shape), axis=0), axis=0)
    return jnp.where(ranks < n_zero, jnp.zeros((), dtype), values)


def _layer_default(key, weight_shape: Shape, bias_shape: Shape | None, dtype) -> dict[str, jax.Array]:
    # torch Linear/_ConvNd.reset_parameters: kaiming_uniform_(W, a=sqrt(5)), then
    # bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in from the weight's own layout.
    # torch draws the weight first (row-major), then the bias, from one stream.
    k_w, k_b = (key, key) if key is None or isinstance(key, Generator) else jax.random.split(key)
    params = {"weight": kaiming_uniform_(k_w, weight_shape, dtype, a=math.sqrt(5))}
    if bias_shape is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight_shape)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        params["bias"] = uniform_(k_b, bias_shape, dtype, -bound, bound)
    return params


def linear_default(
    key, out_features: int, in_features: int, bias: bool = True, dtype=jnp.float32
) -> dict[str, jax.Array]:
    """``nn.Linear`` init: ``{"weight": (out, in), "bias": (out,)}`` (no bias key if ``bias=False``)."""
    return _layer_default(key, (out_features, in_features), (out_features,) if bias else None, dtype)


def conv_default(
    key,
    out_channels: int,
    in_channels_per_group: int,
    kernel_size: Sequence[int],
    bias: bool = True,
    transposed: bool = False,
    groups: int = 1,
    dtype=jnp.float32,
) -> dict[str, jax.Array]:
    """``nn.Conv{n}d`` / ``nn.ConvTranspose{n}d`` init, torch layouts.

    Conv weight: ``(out_channels, in_channels_per_group, *kernel_size)``.
    ConvTranspose weight: ``(in_channels_per_group * groups, out_channels // groups,
    *kernel_size)``, so its fan_in is ``(out_channels // groups) * prod(kernel_size)``.
    """
    if isinstance(kernel_size, int):
        raise TypeError("kernel_size must be a sequence (one entry per spatial dim)")
    kernel_size = tuple(kernel_size)
    if transposed:
        weight_shape = (in_channels_per_group * groups, out_channels // groups, *kernel_size)
    else:
        weight_shape = (out_channels, in_channels_per_group, *kernel_size)
    return _layer_default(key, weight_shape, (out_channels,) if bias else None, dtype)
