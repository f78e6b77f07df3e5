"""``torch.Generator`` (CPU) reproduced in numpy, bit for bit, without torch.

torch's CPU generator is an MT19937 engine (``aten/src/ATen/CPUGeneratorImpl.cpp``,
``aten/src/ATen/core/MT19937RNGEngine.h``):

* ``random()`` is one 32-bit engine output; ``random64()`` is
  ``(random() << 32) | random()`` (first draw in the high word);
* ``manual_seed(s)`` keeps the 64-bit ``s`` for ``initial_seed()`` but seeds
  MT19937 with ``init_genrand(s & 0xffffffff)``; negative Python ints map to
  ``2**64 + s``;
* a fresh ``torch.Generator()`` has seed 67280421310721.

Every draw method below names the torch kernel it reproduces. States are the
5056 bytes of ``CPUGeneratorImplState``, so ``Generator.get_state()`` can be
handed to ``torch.Generator.set_state(torch.from_numpy(...))`` and back.

Draws happen on the host. A jitted function draws through
:meth:`Generator.staged_bernoulli`, an ordered host callback; the host's own
draws wait for the dispatched ones, so the order of draws is the program's,
as in torch. :func:`jax_impl.random.host_draws.jit_with_host_draws` (what
``jax_impl.train``'s steps use) makes a jitted function's draws on the host
before each call instead, and passes them in.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax_impl.random import _normal
from jax_impl.random import _torch_rng as _rng
from jax_impl.random import host_draws
from jax_impl.random._libm_loops import log1p_of_minus

DEFAULT_SEED = 67280421310721  # c10::detail::default_rng_seed_val
_UINT64 = 2**64
_RANDINT_RANDOM64_RANGE = 2**28  # DistributionsHelper.h: range_ >= 1ULL << 28


def _shape(size: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


# Set on a thread while it runs a staged draw's host callback: a computation dispatched from inside
# one can wait for the runtime threads that are running the callback itself.
_IN_CALLBACK = threading.local()


def _fill16(blocks: np.ndarray, mean: float, std: float) -> np.ndarray:
    """torch's ``NormalFill16`` on each row of ``blocks``: compiled by XLA where that route applies
    (:mod:`jax_impl.random._normal_xla`, imported on first use: it imports jax), else in NumPy (always
    inside a host callback, which must not dispatch another computation)."""
    if getattr(_IN_CALLBACK, "active", False):
        return _normal.fill16(blocks, mean, std)
    from jax_impl.random import _normal_xla

    compiled = _normal_xla.fill16(blocks, mean, std)
    return _normal.fill16(blocks, mean, std) if compiled is None else compiled


def _after_staged_draws(method: Callable) -> Callable:
    """``method`` run once the computations already dispatched have made their draws.

    A jitted function holding :meth:`Generator.staged_bernoulli` draws from
    the generator when it runs, asynchronously after its dispatch. torch
    draws in program order, so a host draw (a seed, a ``randperm``, a layer
    init) first waits for those draws (``jax.effects_barrier``: the staged
    draws are ordered effects). Generators that never staged a draw skip the
    wait, and so does a forked child (a DataLoader worker): it runs none of
    its parent's computations and has no JAX runtime to wait on.
    """

    @functools.wraps(method)
    def synced(self: Generator, *args, **kwargs):
        if self._staged_by is not None and self._staged_by == os.getpid():
            import jax  # staged draws exist, so jax is loaded: the import is a lookup

            jax.effects_barrier()
        return method(self, *args, **kwargs)

    return synced


def _float_dtype(dtype: Any) -> np.dtype:
    """A floating dtype torch's normal kernel dispatches (float32, float64, float16, bfloat16)."""
    import ml_dtypes

    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        raise RuntimeError(f'"normal_kernel_cpu" not implemented for \'{_torch_dtype_name(dt)}\'')
    return dt


def _bfloat16() -> Any:
    import ml_dtypes

    return ml_dtypes.bfloat16


def _narrow(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``static_cast<scalar_t>(double)``: float16 and bfloat16 through float, as c10's types convert."""
    if dt in (np.dtype(np.float32), np.dtype(np.float64)):
        return values.astype(dt)
    return values.astype(np.float32).astype(dt)


def _torch_dtype_name(dt: np.dtype) -> str:
    names = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
             "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
    return names.get(dt.name, dt.name)


def _torch_float(x: float) -> str:
    """A double as torch's messages print it (``-1``, ``0.5``)."""
    return f"{x:g}"


def _check_probability(p: float) -> float:
    p = float(p)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return p


def _randperm_uses_random64(n: int) -> bool:
    """Whether ``torch.randperm(n)`` on CPU takes its ``random64`` branch.

    ``randperm_cpu`` (``aten/src/ATen/native/TensorFactories.cpp``) keeps the
    old swap loop "for small n": ``n < (2**32 - 1) // 20 == 214,748,364``.
    """
    return n >= _rng.RANDPERM_RANDOM64_THRESHOLD


class Generator:
    """A CPU ``torch.Generator`` whose every draw matches torch's.

    Args:
        seed: if given, ``manual_seed(seed)`` is applied; otherwise the
            generator starts from torch's default seed 67280421310721, like
            ``torch.Generator()``.
    """

    # The process whose traced computations draw from this generator (staged_bernoulli), if any.
    _staged_by: int | None = None

    def __init__(self, seed: int | None = None) -> None:
        self._engine = _rng.Engine(DEFAULT_SEED)
        self._normal_double: float | None = None
        self._normal_float: float | None = None
        if seed is not None:
            self.manual_seed(seed)

    # -- seeding -----------------------------------------------------------
    @_after_staged_draws
    def manual_seed(self, seed: int) -> Generator:
        """Seed like ``torch.Generator.manual_seed``; returns ``self``.

        Accepts ints in ``[-2**63, 2**64 - 1]``; negatives become ``2**64 + seed``.
        Floats and bools are rejected, as torch does.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise RuntimeError(  # noqa: TRY004 - torch raises RuntimeError
                f"manual_seed expected a long, but got {type(seed).__name__}"
            )
        seed = int(seed)
        if not -(2**63) <= seed < _UINT64:
            raise ValueError("Overflow when unpacking long long")
        self._set_seed(seed % _UINT64)
        return self

    def _set_seed(self, seed: int) -> None:
        # CPUGeneratorImpl::set_current_seed also drops the cached normals.
        self._engine.reseed(seed)
        self._normal_double = None
        self._normal_float = None

    def initial_seed(self) -> int:
        """The 64-bit seed last set (``torch.Generator.initial_seed``)."""
        return self._engine.seed

    @_after_staged_draws
    def seed(self) -> int:
        """Reseed non-deterministically and return the new seed.

        torch draws it from ``c10::detail::getNonDeterministicRandom`` (53
        random bits on CPU); the value itself is not reproducible by design.
        """
        new = secrets.randbits(53)
        self._set_seed(new)
        return new

    # -- state bytes -------------------------------------------------------
    @_after_staged_draws
    def get_state(self) -> np.ndarray:
        """``CPUGeneratorImpl::get_state`` as a uint8 array of 5056 bytes.

        Same bytes as ``torch.Generator.get_state().numpy()``: initial seed,
        ``left``, ``seeded``, ``next``, the 624 words widened to uint64, the
        cached double normal in ``normal_y`` (``normal_x``/``normal_rho`` are
        written as 0), then the cached float normal and its flag.
        """
        key, left, nxt = self._engine.fields()
        st = np.zeros((), dtype=_rng.STATE_DTYPE)
        st["the_initial_seed"] = self._engine.seed
        st["left"] = left
        st["seeded"] = 1
        st["next"] = nxt
        st["state"] = key.astype(np.uint64)
        if self._normal_double is not None:
            st["normal_is_valid"] = 1
            st["normal_y"] = self._normal_double
        if self._normal_float is not None:
            st["is_next_float_normal_sample_valid"] = 1
            st["next_float_normal_sample"] = self._normal_float
        return np.frombuffer(st.tobytes(), dtype=np.uint8).copy()

    @_after_staged_draws
    def set_state(self, new_state: np.ndarray | bytes) -> Generator:
        """``CPUGeneratorImpl::set_state`` from 5056 bytes (numpy, bytes or a tensor).

        Raises ``RuntimeError`` with torch's messages on a wrong size or an
        invalid MT19937 state (``seeded``, ``0 < left <= 624``, ``next <= 624``).
        """
        raw = np.asarray(new_state, dtype=np.uint8).reshape(-1)
        if raw.size != _rng.STATE_SIZE:
            raise RuntimeError(
                f"Expected a CPUGeneratorImplState of size {_rng.STATE_SIZE} "
                f"but found the input RNG state size to be {raw.size}"
            )
        st = np.frombuffer(raw.tobytes(), dtype=_rng.STATE_DTYPE)[0]
        left = int(st["left"])
        nxt = int(st["next"]) & 0xFFFFFFFF  # stored from a uint32_t
        # the engine keeps ``bool seeded_``: any non-zero low byte is true.
        seeded = int(st["seeded"]) & 0xFF
        if not (
            seeded
            and 0 < left <= _rng.MERSENNE_STATE_N
            and nxt <= _rng.MERSENNE_STATE_N
        ):
            raise RuntimeError("Invalid mt19937 state")
        # std::copy of the uint64 words into the engine's uint32 array truncates.
        key = st["state"].astype(np.uint32)
        self._engine.set_fields(int(st["the_initial_seed"]), key, left, nxt)
        self._normal_double = float(st["normal_y"]) if st["normal_is_valid"] else None
        self._normal_float = (
            float(st["next_float_normal_sample"])
            if st["is_next_float_normal_sample_valid"]
            else None
        )
        return self

    # -- raw draws ---------------------------------------------------------
    @_after_staged_draws
    def random_u32(self, n: int) -> np.ndarray:
        """``n`` calls of ``CPUGeneratorImpl::random()`` (uint32)."""
        return self._engine.raw(int(n))

    @_after_staged_draws
    def random_u64(self, n: int) -> np.ndarray:
        """``n`` calls of ``random64()`` = ``(first << 32) | second`` (uint64)."""
        return self._engine.raw64(int(n))

    @_after_staged_draws
    def random_int64(self) -> int:
        """``torch.empty((), dtype=torch.int64).random_(generator=g).item()``.

        ``random_`` without bounds on int64 is ``random64() % 2**63``
        (``DistributionsHelper.h``/``DistributionTemplates.h`` ``random_kernel``).
        This is how ``RandomSampler`` and ``DataLoader`` draw seeds.
        """
        return int(self._engine.raw64(1)[0]) % 2**63

    # -- distributions -----------------------------------------------------
    @_after_staged_draws
    def randint(
        self, low: int, high: int | None = None, size: int | Sequence[int] = ()
    ) -> np.ndarray:
        """``torch.randint(low, high, size, generator=g)`` (int64, CPU).

        ``uniform_int_from_to_distribution`` (``ATen/core/DistributionsHelper.h``):
        ``range = high - low``; each element is ``random() % range + low`` if
        ``range < 2**28`` else ``random64() % range + low`` (open-source
        builds switch at ``1 << 28``, "approx 5% skew"; only fbcode builds use
        ``1 << 32``), drawn serially in C order (``cpu_serial_kernel``).
        ``randint(high, size=...)`` is accepted as in torch (``low = 0``).
        """
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high)
        if high <= low:
            raise RuntimeError(
                f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
            )
        shape = _shape(size)
        count = int(np.prod(shape, dtype=np.int64))
        span = high - low
        if span < _RANDINT_RANDOM64_RANGE:
            draws = self._engine.raw(count).astype(np.int64) % span
        else:
            draws = (self._engine.raw64(count) % np.uint64(span)).astype(np.int64)
        return (draws + low).reshape(shape)

    @_after_staged_draws
    def rand(self, size: int | Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        """``torch.rand(size, generator=g, dtype=dtype)``: float32 or float64.

        ``uniform_real_distribution<float>``: one ``random()`` per element,
        ``(r & (2**24 - 1)) * 2**-24``; for double one ``random64()``,
        ``(r & (2**53 - 1)) * 2**-53`` (``transformation::uniform_real``).
        """
        shape = _shape(size)
        dt = np.dtype(dtype)
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise NotImplementedError(f"torch-identical rand for dtype {dt}; float32 and float64 are reproduced")
        return self._uniforms(math.prod(shape), dt).reshape(shape)

    @_after_staged_draws
    def randperm(self, n: int) -> np.ndarray:
        """``torch.randperm(n, generator=g)`` on CPU (int64), bit-exact.

        ``randperm_cpu`` (``TensorFactories.cpp``):

        * ``n < 214,748,364``: ``r = arange(n)``; for ``i < n-1``:
          ``z = random() % (n-i)``; ``swap(r[i], r[i+z])``;
        * otherwise (inside-out Fisher-Yates): for ``i < n``:
          ``z = random64() % (i+1)``; ``r[i] = r[z]``; ``r[z] = i``.

        The draws are vectorised and the sequential loop is replaced by an
        equivalent sort + pointer-jumping computation (see ``_torch_rng``).
        """
        n = int(n)
        if n < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {n}: [{n}]"
            )
        if n == 0:
            return np.empty(0, dtype=np.int64)
        if not _randperm_uses_random64(n):
            raw = self._engine.raw(n - 1)
            z = raw % np.arange(n, 1, -1, dtype=np.uint32)
            return _rng.randperm_swap(z, n)
        raw = self._engine.raw64(n)
        z = raw % np.arange(1, n + 1, dtype=np.uint64)
        return _rng.randperm_inside_out(z, n)

    @_after_staged_draws
    def multinomial(
        self, weights: np.ndarray, num_samples: int, replacement: bool = False
    ) -> np.ndarray:
        """``torch.multinomial(weights, num_samples, replacement, generator=g)`` (1-D or 2-D, one row per
        distribution).

        See :func:`jax_impl.random._torch_rng.multinomial` for the algorithm: without replacement (or for
        one sample) one ``exponential_`` draw per element of the whole tensor, in C order; with replacement
        each row's samples in turn. Exact with replacement; without replacement exact except that ties in
        ``w / q`` may be ordered differently from torch's ``topk``.
        """
        w = np.asarray(weights)
        if w.ndim not in (1, 2):
            raise RuntimeError("prob_dist must be 1 or 2 dim")
        if w.ndim == 1:
            return _rng.multinomial(self._engine, w, int(num_samples), bool(replacement))
        return _rng.multinomial_rows(self._engine, w, int(num_samples), bool(replacement))

    @_after_staged_draws
    def exponential(self, size: int | Sequence[int], lambd: float = 1.0, dtype: Any = np.float32) -> np.ndarray:
        """``torch.empty(size, dtype=dtype).exponential_(lambd, generator=g)`` on CPU.

        ``exponential_distribution<double>``: one double uniform ``u`` per element in C order,
        ``(-1 / lambd) * log1p(-u)`` in double (the C library's ``log1p``), then cast to ``dtype``.
        """
        lambd = float(lambd)
        dt = np.dtype(dtype)
        if dt.kind != "f" and dt != np.dtype(_bfloat16()):
            raise RuntimeError("Exponential distribution is a continuous probability distribution. dtype must be a "
                               f"floating point but you specified {_torch_dtype_name(dt)}")
        if not lambd > 0.0:
            raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_torch_float(lambd)}")
        shape = _shape(size)
        u = _rng.uniform_double(self._engine, math.prod(shape))
        scale = -1.0 / lambd
        values = scale * log1p_of_minus(u)
        return _narrow(values, dt).reshape(shape)

    @_after_staged_draws
    def bernoulli_p(self, p: np.ndarray, size: Sequence[int] | None = None, dtype: Any = None) -> np.ndarray:
        """``torch.bernoulli(p, generator=g)``, or ``torch.empty(size, dtype).bernoulli_(p)`` with a tensor ``p``
        broadcast to ``size``: torch's tensor kernel, one draw per element in C order.

        ``p`` float64: a double uniform (``random64()``, 53 bits) ``< p``; any other floating ``p``: a float
        uniform (``random()``, 24 bits) ``< float(p)``. Returns 0/1 in ``dtype`` (default ``p``'s dtype).
        """
        p = np.asarray(p)
        shape = p.shape if size is None else _shape(size)
        dt = p.dtype if dtype is None else np.dtype(dtype)
        pf = np.broadcast_to(p, shape).astype(np.float64 if p.dtype == np.float64 else np.float32)
        if pf.size and not ((pf >= 0).all() and (pf <= 1).all()):
            raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
        u = self._uniforms(pf.size, pf.dtype).reshape(shape)
        return (u < pf).astype(dt)

    @_after_staged_draws
    def bernoulli(self, size: int | Sequence[int], p: float) -> np.ndarray:
        """``torch.empty(size).bernoulli_(p, generator=g)`` on CPU, as a bool array.

        One ``random64()`` per element in C order, ``True`` where
        ``(r & (2**53 - 1)) * 2**-53 < p`` (see :func:`jax_impl.random._torch_rng.bernoulli`);
        the same draws for every dtype of the tensor torch fills. Raises
        ``RuntimeError`` as torch does for ``p`` outside ``[0, 1]``.
        """
        p = _check_probability(p)
        shape = _shape(size)
        return _rng.bernoulli(self._engine, math.prod(shape), p).reshape(shape)

    @_after_staged_draws
    def bernoulli_many(self, requests: Sequence[tuple[int | Sequence[int], float]]) -> list[np.ndarray]:
        """``[g.bernoulli(size, p) for size, p in requests]``, the same masks, drawn together (one pass of
        the engine over all their words; see :meth:`jax_impl.random._torch_rng.Engine.bernoulli_many`).

        Every ``p`` is checked before anything is drawn.
        """
        shapes = [_shape(size) for size, _ in requests]
        ps = [_check_probability(p) for _, p in requests]
        masks = _rng.bernoulli_many(self._engine, tuple((math.prod(s), p) for s, p in zip(shapes, ps)))
        return [mask.reshape(shape) for mask, shape in zip(masks, shapes)]

    @_after_staged_draws
    def normal(self, size: int | Sequence[int], mean: float = 0.0, std: float = 1.0,
               dtype: Any = np.float32) -> np.ndarray:
        """``torch.empty(size, dtype=dtype).normal_(mean, std, generator=g)`` on CPU, bit for bit.

        torch's ``normal_kernel`` (``native/cpu/DistributionTemplates.h``; the
        paths are described in :mod:`jax_impl.random._normal`): 16 elements or
        more take Box-Muller over blocks of 16 uniforms drawn for the whole
        tensor first, the last block redrawn when the size is not a multiple
        of 16; fewer take ``normal_distribution<double>`` one element at a
        time, whose second value waits in the generator for the next small
        draw (and is part of :meth:`get_state`). float32, float64, float16 and
        bfloat16, as torch dispatches them.

        Args:
          size: the tensor's shape (C order, contiguous).
          mean: the mean (a Python float, as ``normal_``'s).
          std: the standard deviation, ``>= 0``.
          dtype: float32 (torch's default), float64, float16 or bfloat16.
        """
        std, mean = float(std), float(mean)
        if not std >= 0.0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {_torch_float(std)}")
        shape = _shape(size)
        dtype = _float_dtype(dtype)
        count = math.prod(shape)
        if count == 0:
            return np.empty(shape, dtype)
        if count < 16:
            return self._normal_small(count, mean, std, dtype).reshape(shape)
        return self._normal_fill(count, mean, std, dtype).reshape(shape)

    def randn(self, size: int | Sequence[int], dtype: Any = np.float32) -> np.ndarray:
        """``torch.randn(size, dtype=dtype, generator=g)``: :meth:`normal` with mean 0 and std 1."""
        return self.normal(size, 0.0, 1.0, dtype)

    # -- a compiled step's noise, in halves (jit_with_host_draws) -------------------------------------------
    def fed_form(self, draw: host_draws.Draw) -> Any:
        """How :func:`jax_impl.random.host_draws.jit_with_host_draws` hands ``draw`` to its compiled function:
        ``None`` (the array), or, for a float32 standard normal of 16 to
        :data:`jax_impl.random._normal_xla.HALVES_MAX_COUNT` elements (``randn``/``randn_like`` noise), the
        two halves of its transform (:meth:`feed`), which the function joins (:meth:`from_fed`): the
        transform's result then reaches the step without a wait or a copy through the host."""
        count = math.prod(draw.shape)
        if draw.method != "normal" or draw.args[1:] != (0.0, 1.0, "float32") or count < 16:
            return None
        if math.copysign(1.0, draw.args[1]) < 0:  # a mean of -0.0 keeps a zero result's sign: NumPy's route
            return None
        from jax_impl.random import _normal_xla

        if count > _normal_xla.HALVES_MAX_COUNT:
            return None
        import jax

        half = jax.ShapeDtypeStruct((_normal_xla.halves_rows(count), 8), np.float32)
        return half, half

    @_after_staged_draws
    def feed(self, draw: host_draws.Draw) -> tuple[Any, Any]:
        """``draw`` (one :meth:`fed_form` gives halves for) from this generator, as the halves: the engine
        consumed as :meth:`randn` consumes it."""
        from jax_impl.random import _normal_xla

        count = math.prod(draw.shape)
        full = count // 16 * 16
        blocks = self._uniforms(count, np.float32)[:full].reshape(-1, 16)  # the whole tensor's uniforms first
        if count % 16:  # then torch's redrawn last block
            blocks = np.concatenate([blocks, self._uniforms(16, np.float32).reshape(1, 16)])
        # No computation is dispatched from a host callback's thread.
        return _normal_xla.standard_halves(blocks, dispatch=not getattr(_IN_CALLBACK, "active", False))

    def from_fed(self, draw: host_draws.Draw, fed: tuple[Any, Any]) -> Any:
        """Traced: the array ``draw`` is, from the halves :meth:`feed` gave."""
        from jax_impl.random import _normal_xla

        return _normal_xla.join_halves(*fed, math.prod(draw.shape), draw.shape)

    def _uniforms(self, n: int, dtype: Any) -> np.ndarray:
        """``uniform_real_distribution<T>(0, 1)`` x n: float (24 bits of ``random()``) or double (53 of ``random64()``)."""
        if dtype == np.float64:
            return _rng.uniform_double(self._engine, n)
        bits = self._engine.raw(n) & np.uint32(2**24 - 1)
        return bits.astype(np.float32) * np.float32(2.0**-24)

    def _normal_fill(self, count: int, mean: float, std: float, dtype: np.dtype) -> np.ndarray:
        full = count // 16 * 16
        if dtype in (np.float32, np.float64):
            data = self._uniforms(count, dtype)  # the whole tensor first, then the transform
            data[:full] = _fill16(data[:full].reshape(-1, 16), mean, std).reshape(-1)
            if count % 16:
                data[-16:] = _fill16(self._uniforms(16, dtype).reshape(1, 16), mean, std).reshape(-1)
            return data
        # float16 / bfloat16: float uniforms block by block into a buffer, transformed in float, then narrowed.
        data = np.empty(count, dtype)
        data[:full] = _fill16(self._uniforms(full, np.float32).reshape(-1, 16), mean, std).reshape(-1)
        if count % 16:
            data[-16:] = _fill16(self._uniforms(16, np.float32).reshape(1, 16), mean, std).reshape(-1)
        return data

    def _normal_small(self, count: int, mean: float, std: float, dtype: np.dtype) -> np.ndarray:
        """``normal_distribution<double>(mean, std)`` per element, the cached second value first."""
        values = []
        for _ in range(count):
            if self._normal_double is not None:
                z, self._normal_double = self._normal_double, None
            else:
                u1, u2 = _rng.uniform_double(self._engine, 2).tolist()
                z, self._normal_double = _normal.box_muller_double(u1, u2)
            values.append(z)
        return _narrow(_normal.scale_shift(np.array(values, np.float64), std, mean), dtype)

    def staged_bernoulli(self, size: int | Sequence[int], p: float, *, tied_to: Any = None) -> Any:
        """:meth:`bernoulli` as a bool ``jax.Array`` that a traced (jitted) function can hold.

        The draw is an ordered ``io_callback``: each run of the compiled
        function draws from this generator on the host, in program order,
        when the callback executes. Host draws from this generator made
        afterwards wait for it (see :func:`_after_staged_draws`), so the
        stream is consumed in torch's order whether or not the caller blocks
        on the result. Inside a function compiled by
        :func:`jax_impl.random.host_draws.jit_with_host_draws` the draw is
        instead an argument, drawn on the host before each call. Outside a
        trace the callback runs as one dispatched computation, with the same
        effect. Transformations that refuse
        ordered effects (``jax.checkpoint``, ``pmap``) refuse it.

        Args:
          size: the shape drawn, in C order.
          p: the probability of ``True``.
          tied_to: an array the draw takes as a (zero-size, gradient-free)
            operand: the draw follows its computation, and ``jax.vmap`` over
            it raises (an ordered callback cannot be batched), as
            ``torch.func.vmap``'s default ``randomness="error"`` refuses random
            draws; without it a ``vmap`` would share one draw across the batch.
        """
        p = _check_probability(p)
        shape = _shape(size)
        return self._staged(host_draws.Draw("bernoulli", (shape, p), shape, "bool"), tied_to)

    def staged_normal(self, size: int | Sequence[int], mean: float = 0.0, std: float = 1.0, dtype: Any = np.float32,
                      *, tied_to: Any = None) -> Any:
        """:meth:`normal` as a ``jax.Array`` a traced function can hold (see :meth:`staged_bernoulli`)."""
        dt = _float_dtype(dtype)
        std, mean = float(std), float(mean)
        if not std >= 0.0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {_torch_float(std)}")
        shape = _shape(size)
        return self._staged(host_draws.Draw("normal", (shape, mean, std, dt.name), shape, dt.name), tied_to)

    def staged_rand(self, size: int | Sequence[int], dtype: Any = np.float32, *, tied_to: Any = None) -> Any:
        """:meth:`rand` as a ``jax.Array`` a traced function can hold (see :meth:`staged_bernoulli`)."""
        dt = np.dtype(dtype)
        shape = _shape(size)
        return self._staged(host_draws.Draw("rand", (shape, dt.name), shape, dt.name), tied_to)

    def staged_randint(self, low: int, high: int | None = None, size: int | Sequence[int] = (), *,
                       tied_to: Any = None) -> Any:
        """:meth:`randint` as a ``jax.Array`` a traced function can hold (int64, or int32 without jax's x64)."""
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high)
        if high <= low:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        shape = _shape(size)
        return self._staged(host_draws.Draw("randint", (low, high, shape), shape, "int64"), tied_to)

    def staged_exponential(self, size: int | Sequence[int], lambd: float = 1.0, dtype: Any = np.float32, *,
                           tied_to: Any = None) -> Any:
        """:meth:`exponential` as a ``jax.Array`` a traced function can hold (see :meth:`staged_bernoulli`)."""
        dt = np.dtype(dtype)
        lambd = float(lambd)
        if not lambd > 0.0:
            raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_torch_float(lambd)}")
        shape = _shape(size)
        return self._staged(host_draws.Draw("exponential", (shape, lambd, dt.name), shape, dt.name), tied_to)

    def _staged(self, draw: host_draws.Draw, tied_to: Any) -> Any:
        """``draw`` inside a trace: an argument fed by :func:`jit_with_host_draws`, else an ordered callback."""
        import jax  # jax_impl.random is imported by jax-free code (torch_ref's data sets): jax on first use
        import jax.numpy as jnp
        from jax.experimental import io_callback

        dtype = jnp.dtype(draw.dtype)
        if dtype == jnp.int64 and not jax.config.jax_enable_x64:
            dtype = jnp.dtype(jnp.int32)
        fed = host_draws.intercept(self, draw._replace(dtype=dtype.name))
        if fed is not None:  # traced by jit_with_host_draws: drawn on the host before each call
            return fed
        self._staged_by = os.getpid()
        operands = () if tied_to is None else (jax.lax.stop_gradient(jnp.ravel(tied_to))[:0],)
        return io_callback(self._callback(draw, dtype), jax.ShapeDtypeStruct(draw.shape, dtype), *operands,
                           ordered=True)

    def _callback(self, draw: host_draws.Draw, dtype: Any) -> Any:
        """The host function of ``draw``'s callback, one per draw and dtype of this generator.

        jax compiles a callback run outside ``jit`` (an eager ``jax.vjp`` through a dropout) once per
        callback function: the same function for the same draw compiles once, not at every call. The
        function remembers its generator, so a copy of this generator makes its own.
        """
        callbacks = self.__dict__.setdefault("_callbacks", {})
        run = callbacks.get((draw, dtype.name))
        if run is None or run.generator is not self:
            def run(*_) -> np.ndarray:
                # Runs on a runtime thread: no _after_staged_draws here, the barrier would wait for itself.
                _IN_CALLBACK.active = True
                try:
                    return np.asarray(draw.run(self, synced=False)).astype(dtype)
                finally:
                    _IN_CALLBACK.active = False

            run.generator = self
            callbacks[(draw, dtype.name)] = run
        return run


def staged_bernoulli_per_replica(generators: Sequence[Generator | None], axis_name: str, size: int | Sequence[int],
                                 p: float, *, tied_to: Any) -> Any:
    """:meth:`Generator.staged_bernoulli` where replica ``i`` of the mapped axis ``axis_name`` draws from
    ``generators[i]`` (``None``: a replica another process runs; a draw routed there raises).

    The replica's index (``lax.axis_index``) goes to the host with the draw;
    each replica's ordered callbacks run in its own program order and each
    reads and advances only its own generator. Host draws from these
    generators made afterwards wait for the staged ones, as for
    :meth:`Generator.staged_bernoulli`.
    """
    p = _check_probability(p)
    shape = _shape(size)
    count = math.prod(shape)
    engines = [None if g is None else g._engine for g in generators]
    for g in generators:
        if g is not None:
            g._staged_by = os.getpid()

    def draw(index, *_) -> np.ndarray:
        engine = engines[int(index)]
        if engine is None:
            raise RuntimeError(f"replica {int(index)} draws in another process: its generator is not here")
        return _rng.bernoulli(engine, count, p).reshape(shape)

    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    tie = jax.lax.stop_gradient(jnp.ravel(tied_to))[:0]
    return io_callback(draw, jax.ShapeDtypeStruct(shape, jnp.bool_), jax.lax.axis_index(axis_name), tie,
                       ordered=True)


default_generator = Generator(secrets.randbits(53))
"""Module-level generator mirroring ``torch.default_generator``."""


def manual_seed(seed: int) -> Generator:
    """``torch.manual_seed``: ``int(seed)`` then seed :data:`default_generator`."""
    return default_generator.manual_seed(int(seed))


def initial_seed() -> int:
    """``torch.initial_seed``: the default generator's seed."""
    return default_generator.initial_seed()


def seed() -> int:
    """``torch.seed``: reseed the default generator non-deterministically."""
    return default_generator.seed()


def get_rng_state() -> np.ndarray:
    """``torch.get_rng_state().numpy()`` for :data:`default_generator`."""
    return default_generator.get_state()


def set_rng_state(new_state: np.ndarray | bytes) -> None:
    """``torch.set_rng_state`` for :data:`default_generator`."""
    default_generator.set_state(new_state)
